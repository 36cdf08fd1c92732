//! The main example's application: the webhook route with the layer on its `POST` alone, a
//! health check beside it, and the server that stops gracefully. The binary (`src/main.rs`)
//! reads the settings and opens the store; the metrics and transactional examples reuse
//! [`serve`].

use std::future::Future;

use axum::{
    Json, Router,
    routing::{get, post},
};
use sangho_examples_support::{Settings, loggable_url};
use sangho_webhook::{SanghoEvent, SanghoWebhookLayer};
use serde_json::{Value, json};

/// The path the provider posts to.
pub const WEBHOOK_PATH: &str = "/webhooks/sangho";

/// The handler: runs once per event. `SanghoEvent` is the event the layer verified (a route
/// without the layer answers 500 `webhook_layer_missing`). Answer 2xx only once the event's
/// effects are durable: anything else releases the event for the provider's next delivery.
async fn handle(event: SanghoEvent) -> Json<Value> {
    tracing::info!(
        id = event.id(),
        kind = event.event_type(),
        livemode = ?event.livemode(),
        "processing webhook event"
    );
    Json(json!({ "received": true }))
}

/// The app: the webhook route and a health check beside it.
///
/// `route_layer` puts the layer behind the method check: a `GET` on the webhook route answers
/// 405 (with `Allow: POST`), not a signature refusal, and an unknown path 404, without the
/// layer reading anything.
pub fn app(webhooks: SanghoWebhookLayer) -> Router {
    Router::new()
        .route(WEBHOOK_PATH, post(handle).route_layer(webhooks))
        .route("/health", get(|| async { "ok" }))
}

/// Serves `app` at the configured address until `shutdown` completes (see
/// [`shutdown_signal`](sangho_examples_support::shutdown_signal)), then stops accepting and
/// lets the requests in progress finish.
pub async fn serve(
    app: Router,
    settings: &Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(settings.address).await?;
    let address = listener.local_addr()?;
    let store = loggable_url(settings.store_url());
    tracing::info!(%address, %store, "listening on POST {WEBHOOK_PATH}");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
