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
    inbox::{CachedGauges, Inbox, InboxReceiver, WorkerMetrics},
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

/// The app the provider talks to: the receipt on the webhook route, and the health check.
pub fn app(receiver: InboxReceiver, health: Health) -> Router {
    Router::new()
        .route_service(WEBHOOK_PATH, receiver)
        .route("/health", get(health_check))
        .with_state(Arc::new(health))
}

/// The health check: the inbox's gauges (read at most every 5 s, from its indexes), and a 503
/// when events wait and the workers do not take them.
///
/// It fails when the oldest waiting event waited longer than `max_wait` (no worker runs, or
/// the workers cannot keep up), or when events wait and this process's workers have taken none
/// for `max_idle` (they are stuck); and when the inbox cannot be read.
#[derive(Debug, Clone)]
pub struct Health {
    gauges: CachedGauges,
    workers: WorkerMetrics,
    max_wait: Duration,
    max_idle: Duration,
}

impl Health {
    /// The default longest wait of the oldest waiting event: 5 min.
    pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(300);
    /// The default longest time without a take while events wait: 60 s.
    pub const DEFAULT_MAX_IDLE: Duration = Duration::from_secs(60);

    /// The health of `inbox`, whose events `workers` take.
    pub fn new(inbox: Arc<dyn Inbox>, workers: WorkerMetrics) -> Self {
        Self {
            gauges: CachedGauges::new(inbox, Duration::from_secs(5)),
            workers,
            max_wait: Self::DEFAULT_MAX_WAIT,
            max_idle: Self::DEFAULT_MAX_IDLE,
        }
    }

    /// Fails once the oldest waiting event waited longer than `max_wait`, or events wait and
    /// no worker took one for `max_idle`.
    pub fn with_limits(mut self, max_wait: Duration, max_idle: Duration) -> Self {
        (self.max_wait, self.max_idle) = (max_wait, max_idle);
        self
    }

    /// Reads the gauges again at most once per `max_age` (5 s by default).
    pub fn with_gauges_max_age(mut self, max_age: Duration) -> Self {
        self.gauges = self.gauges.with_max_age(max_age);
        self
    }
}

async fn health_check(State(health): State<Arc<Health>>) -> (StatusCode, Json<Value>) {
    let gauges = match health.gauges.get().await {
        Ok(gauges) => gauges,
        Err(error) => {
            tracing::error!(%error, "the inbox cannot be read");
            let body = json!({ "error": "inbox_unavailable" });
            return (StatusCode::SERVICE_UNAVAILABLE, Json(body));
        }
    };
    let idle = health.workers.since_last_take();
    let mut problems = Vec::new();
    if let Some(waited) = gauges.oldest_waiting {
        if waited > health.max_wait {
            problems.push("the oldest waiting event waited too long");
        }
        if idle.is_none_or(|idle| idle > health.max_idle) {
            problems.push("events wait and no worker takes them");
        }
    }
    let status = match problems.is_empty() {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (
        status,
        Json(json!({
            "received": gauges.received,
            "in_flight": gauges.in_flight,
            "dead": gauges.dead,
            "oldest_waiting_seconds": gauges.oldest_waiting.map(|age| age.as_secs_f64()),
            "seconds_since_last_take": idle.map(|idle| idle.as_secs_f64()),
            "problems": problems,
        })),
    )
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
