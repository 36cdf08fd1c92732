//! The inbox example's application: the receipt on the webhook route, the handlers the
//! workers call, and the store a URL names. The binary (`src/main.rs`) wires them together.
//!
//! The handlers are the direct mode's: the same `SanghoEvent` extractor, the same route. In
//! inbox mode they run in an [`InboxWorker`](sangho_webhook::inbox::InboxWorker), never inside
//! the provider's request: the receipt answers 202 as soon as the event is durable.

use std::{sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, post},
};
use sangho_example_axum::WEBHOOK_PATH;
use sangho_examples_support::BoxError;
use sangho_webhook::{
    SanghoEvent,
    inbox::{Inbox, InboxReceiver},
};
use sangho_webhook_sqlx::{PostgresStore, PurgeTask, SqliteStore};
use serde_json::{Value, json};

/// How long completed events are kept (and answered as duplicates): 72 h, beyond the
/// provider's 48 hours of redeliveries.
pub const RETENTION: Duration = Duration::from_secs(72 * 3600);

/// The handler, exactly as in the direct mode. Answer 2xx only once the event's effects are
/// durable: anything else is a failed attempt, retried later.
async fn handle(event: SanghoEvent) -> Json<Value> {
    tracing::info!(
        id = event.id(),
        kind = event.event_type(),
        "processing webhook event"
    );
    Json(json!({ "processed": true }))
}

/// The handlers the workers call, on the paths the events were received on.
pub fn handlers() -> Router {
    Router::new().route(WEBHOOK_PATH, post(handle))
}

/// The app the provider talks to: the receipt on the webhook route, and a health check that
/// reports the inbox's numbers (503 when the inbox cannot be read).
pub fn app(receiver: InboxReceiver, inbox: Arc<dyn Inbox>) -> Router {
    Router::new()
        .route_service(WEBHOOK_PATH, receiver)
        .route("/health", get(health))
        .with_state(inbox)
}

async fn health(State(inbox): State<Arc<dyn Inbox>>) -> (StatusCode, Json<Value>) {
    match inbox.stats().await {
        Ok(stats) => (
            StatusCode::OK,
            Json(json!({
                "received": stats.received,
                "in_flight": stats.in_flight,
                "completed": stats.completed,
                "dead": stats.dead,
                "oldest_waiting_seconds": stats.oldest_waiting.map(|age| age.as_secs_f64()),
            })),
        ),
        Err(error) => {
            tracing::error!(%error, "the inbox cannot be read");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "error": "inbox_unavailable" })),
            )
        }
    }
}

/// The inbox a `SANGHO_STORE_URL` names, migrated, with its purge of completed events
/// running every hour: `sqlite://FILE` or `postgres://…`. Inbox mode acknowledges an event
/// only once it is durable, so `memory:` (lost on restart) and `redis://` (no inbox yet) are
/// refused.
pub async fn open(url: &str) -> Result<(Store, PurgeTask), BoxError> {
    let hour = Duration::from_secs(3600);
    if url.starts_with("sqlite:") {
        let store = SqliteStore::connect(url).await?;
        store.migrate().await?;
        let purge = store.spawn_purge(RETENTION, hour);
        return Ok((Store::Sqlite(store), purge));
    }
    if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let store = PostgresStore::connect(url).await?;
        store.migrate().await?;
        let purge = store.spawn_purge(RETENTION, hour);
        return Ok((Store::Postgres(store), purge));
    }
    Err(format!(
        "inbox mode needs a durable, shared store: use sqlite://FILE or postgres://… \
         (memory: would acknowledge events that a restart loses; the Redis store has no inbox \
         yet), not {}",
        sangho_examples_support::loggable_url(url)
    )
    .into())
}

/// The stores inbox mode runs on here.
#[derive(Debug, Clone)]
pub enum Store {
    /// `sqlite://FILE`.
    Sqlite(SqliteStore),
    /// `postgres://…`.
    Postgres(PostgresStore),
}

impl Store {
    /// The store as the receipt's and the workers' inbox.
    pub fn inbox(&self) -> Arc<dyn Inbox> {
        match self {
            Self::Sqlite(store) => Arc::new(store.clone()),
            Self::Postgres(store) => Arc::new(store.clone()),
        }
    }
}
