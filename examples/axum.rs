//! The main example: an axum server that receives Sangho webhooks.
//!
//! ```sh
//! cargo run --example axum
//! ```
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `SANGHO_WEBHOOK_SECRET` | `whsec_development_only` (with a warning) | the endpoint secret |
//! | `SANGHO_WEBHOOK_ADDR` | `127.0.0.1:3000` | where to listen |
//! | `SANGHO_STORE_URL` | `memory:` | the idempotency store |
//!
//! It serves `POST /webhooks/sangho`, logs each event and answers `{"received":true}`. Ctrl-C
//! stops it gracefully: in-flight deliveries finish first.

use std::{error::Error, net::SocketAddr};

use axum::{Extension, Json, Router, routing::post};
use sangho_webhook::{SanghoEvent, SanghoWebhookLayer, signature::Secret, store::MokaStore};
use serde_json::{Value, json};
use tracing_subscriber::EnvFilter;

/// The development secret used when `SANGHO_WEBHOOK_SECRET` is unset. Never use it in
/// production: anybody who reads this file can sign events for it.
const DEVELOPMENT_SECRET: &str = "whsec_development_only";

async fn handle(Extension(event): Extension<SanghoEvent>) -> Json<Value> {
    tracing::info!(
        id = event.id(),
        kind = event.event_type(),
        livemode = ?event.livemode(),
        "processing webhook event"
    );
    Json(json!({ "received": true }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sangho_webhook=debug".into()),
        )
        .init();

    let secret = match std::env::var("SANGHO_WEBHOOK_SECRET") {
        Ok(secret) => Secret::new(secret)?,
        Err(_) => {
            tracing::warn!(
                "SANGHO_WEBHOOK_SECRET is unset: using the development secret {DEVELOPMENT_SECRET:?}. \
                 Anybody can forge events for it; never run like this in production."
            );
            Secret::new(DEVELOPMENT_SECRET)?
        }
    };
    let address: SocketAddr = std::env::var("SANGHO_WEBHOOK_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
        .parse()?;
    let store_url = std::env::var("SANGHO_STORE_URL").unwrap_or_else(|_| "memory:".to_owned());

    let webhooks = match store_url.as_str() {
        "memory:" => {
            tracing::warn!("memory: store: events are forgotten on restart and not shared");
            SanghoWebhookLayer::new(secret, MokaStore::new())
        }
        other => return Err(format!("unsupported SANGHO_STORE_URL {other:?}").into()),
    };

    let app = Router::new()
        .route("/webhooks/sangho", post(handle))
        .layer(webhooks);
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(%address, store = %store_url, "listening on POST /webhooks/sangho");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down");
        })
        .await?;
    Ok(())
}
