//! A tonic gRPC service and the Sangho webhook route on one port.
//!
//! ```text
//! SANGHO_WEBHOOK_SECRET=whsec_... cargo run --example tonic
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
//! Environment:
//!
//! - `SANGHO_WEBHOOK_SECRET`: the endpoint secret. Unset: the development secret
//!   `whsec_development_only`, with a warning.
//! - `SANGHO_WEBHOOK_ADDR`: the address to listen on, `127.0.0.1:3000` by default.
//! - `SANGHO_STORE_URL`: the idempotency store; this example knows `memory:` (the default).
//!   The axum example (`cargo run --example axum`) shows the SQL and Redis stores.

use std::{net::SocketAddr, process::ExitCode};

use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
use sangho_webhook_example_tonic::{EventLog, WEBHOOK_PATH, app, drain, serve, shutdown_signal};
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The secret used when `SANGHO_WEBHOOK_SECRET` is unset. Never use it in production.
const DEVELOPMENT_SECRET: &str = "whsec_development_only";

/// The layer from the environment (`SANGHO_WEBHOOK_SECRET`, `SANGHO_STORE_URL`).
fn layer_from_env() -> Result<SanghoWebhookLayer, BoxError> {
    let secret = match std::env::var("SANGHO_WEBHOOK_SECRET") {
        Ok(secret) => secret,
        Err(_) => {
            tracing::warn!(
                "SANGHO_WEBHOOK_SECRET is not set: using the development secret {DEVELOPMENT_SECRET:?}. \
                 Anybody can sign webhooks with it; never run like this in production."
            );
            DEVELOPMENT_SECRET.to_owned()
        }
    };
    let store = match std::env::var("SANGHO_STORE_URL").as_deref() {
        Err(_) | Ok("" | "memory:") => MokaStore::new(),
        Ok(other) => {
            return Err(format!(
                "SANGHO_STORE_URL={other:?}: this example knows `memory:` only; \
                 see `cargo run --example axum` for the SQL and Redis stores"
            )
            .into());
        }
    };
    tracing::warn!(
        "using the in-memory store: it forgets processed events on restart and is not shared \
         between replicas"
    );
    let secret = Secret::new(secret).map_err(|error| format!("SANGHO_WEBHOOK_SECRET: {error}"))?;
    Ok(SanghoWebhookLayer::new(secret, store))
}

/// Serves until SIGTERM or Ctrl-C; exits 0 once every delivery in progress has finished.
/// (Public so that the example's tests can run it as a process of its own.)
#[tokio::main]
pub async fn main() -> ExitCode {
    match run().await {
        Ok(status) => status,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<ExitCode, BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sangho_webhook=debug".into()),
        )
        .init();

    let shutdown = shutdown_signal()?;
    let layer = layer_from_env()?;
    let addr: SocketAddr = std::env::var("SANGHO_WEBHOOK_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
        .parse()?;
    let listener = TcpListener::bind(addr).await?;
    let address = listener.local_addr()?;
    tracing::info!(
        %address,
        "listening on POST {WEBHOOK_PATH} (webhooks) and gRPC EventLog beside it"
    );

    serve(listener, app(layer.clone(), EventLog::new()), shutdown).await?;
    Ok(drain(&layer).await)
}
