//! The main example with Prometheus metrics at `GET /metrics` (see the crate's docs).
//!
//! ```sh
//! cargo run -p sangho-example-metrics
//! curl -s http://127.0.0.1:3000/metrics
//! ```

use std::{process::ExitCode, time::Duration};

use metrics_exporter_prometheus::PrometheusBuilder;
use sangho_example_axum::{app, serve};
use sangho_example_metrics::{UnansweredDeliveries, describe, with_metrics};
use sangho_examples_support::{
    BoxError, Settings, Store, exit_status, log_filter, shutdown_signal,
};
use tracing_subscriber::{Layer as _, prelude::*};

/// Serves until SIGTERM or Ctrl-C, as the main example does.
#[tokio::main]
async fn main() -> ExitCode {
    exit_status(run().await)
}

async fn run() -> Result<ExitCode, BoxError> {
    // The log filter applies to the printed logs only: the counting layer sees its events
    // even under RUST_LOG=error.
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_filter(log_filter()))
        .with(UnansweredDeliveries::layer())
        .init();
    let metrics = PrometheusBuilder::new().install_recorder()?;
    describe();
    // The exporter leaves upkeep (draining histograms) to its user; cheap, and harmless here.
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });

    let settings = Settings::from_env()?;
    let shutdown = shutdown_signal()?;
    let webhooks = Store::connect(settings.store_url())
        .await?
        .webhooks(settings.secret.clone());
    let app = with_metrics(app(webhooks.layer.clone()), metrics);
    serve(app, &settings, shutdown).await?;
    Ok(webhooks.finish().await)
}
