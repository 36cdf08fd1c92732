//! What the sangho-webhook examples share, so that each example shows its own idea only:
//!
//! - [`Settings`]: the environment, read once (`SANGHO_WEBHOOK_SECRET`, `SANGHO_WEBHOOK_ADDR`,
//!   `SANGHO_STORE_URL`);
//! - [`Store`] (feature `stores`): the idempotency store a `SANGHO_STORE_URL` names, migrated,
//!   with its purge task;
//! - [`shutdown_signal`] and [`drain`]: the graceful stop on SIGTERM or Ctrl-C;
//! - [`loggable_url`]: a store URL without its credentials, for the log;
//! - [`init_logging`]: the log every example prints;
//! - [`testing`] (feature `testing`): for the examples' tests.

#![forbid(unsafe_code)]

mod redact;
mod settings;
mod shutdown;
#[cfg(feature = "stores")]
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use redact::loggable_url;
pub use settings::{DEFAULT_STORE_URL, DEVELOPMENT_SECRET, Settings};
pub use shutdown::{DRAIN_DEADLINE, drain, shutdown_signal};
#[cfg(feature = "stores")]
pub use store::{PURGE_PERIOD, Store, Webhooks};

use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

/// The examples of the workspace's README, compiled as doctests here, with the dependencies a
/// user adds (see this crate's dev-dependencies), rather than in sangho-webhook itself.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// The error an example's start answers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `RUST_LOG`, or `info` with the layer's `debug` events.
pub fn log_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sangho_webhook=debug".into())
}

/// Prints the log to the terminal, filtered by [`log_filter`].
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .init();
}

/// The exit status of a server's run: its own (that of the drain), or, when it could not
/// start, 1 with the reason printed.
pub fn exit_status(run: Result<ExitCode, BoxError>) -> ExitCode {
    run.unwrap_or_else(|error| {
        eprintln!("error: {error}");
        ExitCode::FAILURE
    })
}
