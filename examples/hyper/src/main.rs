//! Receiving Sangho webhooks with hyper 1 and hyper-util, without a framework (see the crate's
//! docs).
//!
//! ```text
//! SANGHO_WEBHOOK_SECRET=whsec_... cargo run -p sangho-example-hyper
//! ```

use std::process::ExitCode;

use sangho_example_hyper::{WEBHOOK_PATH, app, handle, serve};
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
    tracing::info!(%address, "listening on POST {WEBHOOK_PATH}");

    let handler = tower::service_fn(handle);
    serve(listener, app(layer.clone(), handler), shutdown).await?;
    Ok(drain(&layer).await)
}
