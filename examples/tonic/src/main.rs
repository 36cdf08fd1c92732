//! A tonic gRPC service and the Sangho webhook route on one port.
//!
//! ```text
//! SANGHO_WEBHOOK_SECRET=whsec_... cargo run -p sangho-example-tonic
//! ```
//!
//! `POST /webhooks/sangho` goes through `SanghoWebhookLayer` (signature, idempotency); the gRPC
//! service `sangho.example.v1.EventLog` (see `proto/event_log.proto`) does not, and lists the
//! events the webhook route processed. The application is built in `src/lib.rs`.
//!
//! SIGTERM or Ctrl-C stops it gracefully: it stops accepting, lets the requests in progress
//! finish, waits for the webhook handlers still running (those whose provider hung up
//! included), and exits 0.
//!
//! It reads the settings every example reads; of the stores, it knows `memory:` (the
//! default). The main example (`cargo run -p sangho-example-axum`) shows the SQL and Redis
//! stores.

use std::process::ExitCode;

use sangho_example_tonic::{EventLog, WEBHOOK_PATH, app, serve};
use sangho_examples_support::{
    BoxError, Settings, drain, exit_status, init_logging, shutdown_signal,
};
use sangho_webhook::SanghoWebhookLayer;
use tokio::net::TcpListener;

/// Serves until SIGTERM or Ctrl-C; exits 0 once every delivery in progress has finished.
#[tokio::main]
async fn main() -> ExitCode {
    exit_status(run().await)
}

async fn run() -> Result<ExitCode, BoxError> {
    init_logging();
    let shutdown = shutdown_signal()?;
    let settings = Settings::from_env()?;
    let layer = SanghoWebhookLayer::new(settings.secret.clone(), settings.memory_store()?);
    let listener = TcpListener::bind(settings.address).await?;
    let address = listener.local_addr()?;
    tracing::info!(
        %address,
        "listening on POST {WEBHOOK_PATH} (webhooks) and gRPC EventLog beside it"
    );

    serve(listener, app(layer.clone(), EventLog::new()), shutdown).await?;
    Ok(drain(&layer).await)
}
