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
//! | `SANGHO_STORE_URL` | `sqlite://sangho-webhooks.db` | the idempotency store (below) |
//!
//! | `SANGHO_STORE_URL` | store |
//! | --- | --- |
//! | `sqlite://FILE` | `SqliteStore` on FILE (created if missing): durable, one server |
//! | `postgres://…` | `PostgresStore`: durable, shared by every replica |
//! | `redis://…` | `RedisStore`: shared by every replica, completed events expire by themselves |
//! | `memory:` | `MokaStore`: forgotten on restart, one process only |
//!
//! The SQL stores are migrated at start, and a purge task deletes completed events past the
//! retention every hour.
//!
//! It serves `POST /webhooks/sangho`, logs each event and answers `{"received":true}`, and
//! `GET /health` beside it. With a SQL store (`sqlite://`, `postgres://`), each
//! `payment_intent.succeeded` event is recorded in a `payments` table (one row per event id,
//! created at start) **in one transaction with the event's completion**
//! (`SqlStore::complete_in`): a crash after the commit leaves the payment and the completed
//! event together, so the provider's redelivery is a duplicate, never a second payment.
//!
//! The webhook layer is on the webhook route's `POST` only (`route_layer`): another method on it
//! answers 405 and an unknown path 404, without the layer reading anything.
//!
//! SIGTERM (`docker stop`, Kubernetes, systemd) or Ctrl-C stops it gracefully: it stops
//! accepting, lets the requests in progress finish, waits for the webhook handlers still
//! running (those whose provider hung up included), and exits 0 (1 if the drain's 30 s
//! deadline had to cut some off). A setting that cannot work (a secret with a trailing newline,
//! say) stops it at start with the reason. The log shows the store's scheme, host, port and
//! path, never its user name, password or query.

use std::{error::Error, future::Future, net::SocketAddr, process::ExitCode, time::Duration};

use axum::{
    Extension, Json, Router,
    http::StatusCode,
    routing::{get, post},
};
use sangho_webhook::{SanghoEvent, SanghoWebhookLayer, signature::Secret, store::MokaStore};
use sangho_webhook_redis::RedisStore;
use sangho_webhook_sqlx::{CompleteInError, PostgresStore, PurgeTask, SqliteStore, sqlx};
use serde_json::{Value, json};
use tracing_subscriber::EnvFilter;

#[path = "support/shutdown.rs"]
mod shutdown;
pub use shutdown::{drain, shutdown_signal};

/// The development secret used when `SANGHO_WEBHOOK_SECRET` is unset. Never use it in
/// production: anybody who reads this file can sign events for it.
const DEVELOPMENT_SECRET: &str = "whsec_development_only";

/// How often the SQL stores delete completed events older than the retention.
const PURGE_PERIOD: Duration = Duration::from_secs(3600);

/// Builds the layer over the store `url` names; answers the purge task too, for SQL stores.
pub async fn webhook_layer(
    secret: Secret,
    url: &str,
) -> Result<(SanghoWebhookLayer, Option<PurgeTask>), Box<dyn Error>> {
    let webhooks = webhooks(secret, url).await?;
    Ok((webhooks.layer, webhooks.purge))
}

/// What the store `url` gives the app: the layer, the purge task (SQL stores), and the
/// payments table (SQL stores).
pub struct Webhooks {
    /// The layer over the store.
    pub layer: SanghoWebhookLayer,
    /// The purge task of a SQL store.
    pub purge: Option<PurgeTask>,
    /// The payments table of a SQL store, in the store's database.
    pub payments: Option<Payments>,
}

/// Builds the layer over the store `url` names; with a SQL store, migrates it and the
/// payments table, and starts the purge task.
pub async fn webhooks(secret: Secret, url: &str) -> Result<Webhooks, Box<dyn Error>> {
    tracing::info!(store = %loggable_url(url), "opening the idempotency store");
    let retention = SanghoWebhookLayer::DEFAULT_RETENTION;
    let (layer, purge, payments) = if url.starts_with("sqlite:") {
        let store = SqliteStore::connect(url).await?;
        store.migrate().await?;
        let purge = store.spawn_purge(retention, PURGE_PERIOD);
        let payments = Payments::Sqlite(store.clone());
        (
            SanghoWebhookLayer::new(secret, store),
            Some(purge),
            Some(payments),
        )
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let store = PostgresStore::connect(url).await?;
        store.migrate().await?;
        let purge = store.spawn_purge(retention, PURGE_PERIOD);
        let payments = Payments::Postgres(store.clone());
        (
            SanghoWebhookLayer::new(secret, store),
            Some(purge),
            Some(payments),
        )
    } else if url.starts_with("redis:") || url.starts_with("rediss:") {
        let store = RedisStore::connect(url).await?;
        (SanghoWebhookLayer::new(secret, store), None, None)
    } else if url == "memory:" {
        tracing::warn!("memory: store: events are forgotten on restart and not shared");
        (
            SanghoWebhookLayer::new(secret, MokaStore::new()),
            None,
            None,
        )
    } else {
        return Err(format!(
            "unsupported SANGHO_STORE_URL {:?}: use sqlite://, postgres://, redis:// or memory:",
            loggable_url(url)
        )
        .into());
    };
    if let Some(payments) = &payments {
        payments.migrate().await?;
    }
    Ok(Webhooks {
        layer,
        purge,
        payments,
    })
}

/// The `payments` table, in the database of the SQL store the layer runs on (the same store
/// value: its `complete_in` joins the handler's transaction).
#[derive(Clone)]
pub enum Payments {
    /// On the SQLite store's file.
    Sqlite(SqliteStore),
    /// On the PostgreSQL store's database.
    Postgres(PostgresStore),
}

/// One row per event id: the primary key refuses a second row even from a mistaken handler.
const PAYMENTS_TABLE: &str = "\
CREATE TABLE IF NOT EXISTS payments (
    event_id    VARCHAR(50) PRIMARY KEY,
    payment_id  VARCHAR(100),
    amount      BIGINT,
    recorded_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

impl Payments {
    /// Creates the table if it is missing.
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(store) => {
                sqlx::raw_sql(PAYMENTS_TABLE).execute(store.pool()).await?;
            }
            Self::Postgres(store) => {
                sqlx::raw_sql(PAYMENTS_TABLE).execute(store.pool()).await?;
            }
        }
        Ok(())
    }

    /// Records the payment of `event` and the event's completion in one transaction: both
    /// commit, or neither does. The transaction rolls back on any error (`tx` is dropped).
    pub async fn record(&self, event: &SanghoEvent) -> Result<(), CompleteInError> {
        let object: Value = event.data_object().unwrap_or(Value::Null);
        let payment_id = object["id"].as_str();
        let amount = object["amount"].as_i64();
        let retention = SanghoWebhookLayer::DEFAULT_RETENTION;
        match self {
            Self::Sqlite(store) => {
                let mut tx = store.pool().begin().await?;
                sqlx::query(
                    "INSERT INTO payments (event_id, payment_id, amount) VALUES (?1, ?2, ?3)",
                )
                .bind(event.id())
                .bind(payment_id)
                .bind(amount)
                .execute(&mut *tx)
                .await?;
                let completion = store.complete_in(&mut *tx, event, retention).await?;
                completion.commit(tx).await?;
            }
            Self::Postgres(store) => {
                let mut tx = store.pool().begin().await?;
                sqlx::query(
                    "INSERT INTO payments (event_id, payment_id, amount) VALUES ($1, $2, $3)",
                )
                .bind(event.id())
                .bind(payment_id)
                .bind(amount)
                .execute(&mut *tx)
                .await?;
                let completion = store.complete_in(&mut *tx, event, retention).await?;
                completion.commit(tx).await?;
            }
        }
        Ok(())
    }
}

/// The handler: runs once per event. `SanghoEvent` is the event the layer verified (a route
/// without the layer answers 500 `webhook_layer_missing`). Answer 2xx only once the event's
/// effects are durable: anything else releases the event for the provider's next delivery.
///
/// With a SQL store, a `payment_intent.succeeded` is recorded with its completion in one
/// transaction. If that fails (the database, or this delivery's claim was taken over by
/// another one), nothing was committed: answer 500, and the provider's next delivery finds the
/// event processed by the other delivery, or processes it.
async fn handle(
    payments: Option<Extension<Payments>>,
    event: SanghoEvent,
) -> Result<Json<Value>, (StatusCode, Json<Value>)> {
    tracing::info!(
        id = event.id(),
        kind = event.event_type(),
        livemode = ?event.livemode(),
        "processing webhook event"
    );
    if let Some(Extension(payments)) = payments
        && event.event_type() == "payment_intent.succeeded"
    {
        if let Err(error) = payments.record(&event).await {
            tracing::warn!(id = event.id(), %error, "payment not recorded; rolled back");
            return Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({ "error": "payment_not_recorded" })),
            ));
        }
        tracing::info!(
            id = event.id(),
            "payment recorded with the event's completion"
        );
    }
    Ok(Json(json!({ "received": true })))
}

/// The app: the webhook route with the layer on its `POST` alone, and a health check beside it.
pub fn app(webhooks: SanghoWebhookLayer) -> Router {
    app_with_payments(webhooks, None)
}

/// [`app`], whose handler records payments in `payments` (the database of the layer's SQL
/// store) with each event's completion.
///
/// `route_layer` puts the layer behind the method check: a `GET` on the webhook route answers
/// 405 (with `Allow: POST`), not a signature refusal.
pub fn app_with_payments(webhooks: SanghoWebhookLayer, payments: Option<Payments>) -> Router {
    let route = post(handle).route_layer(webhooks);
    let route = match payments {
        Some(payments) => route.layer(Extension(payments)),
        None => route,
    };
    Router::new()
        .route("/webhooks/sangho", route)
        .route("/health", get(|| async { "ok" }))
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

async fn run() -> Result<ExitCode, Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .init();
    let config = Config::from_env()?;
    // Listening from the start: a SIGTERM while the store connects is a graceful stop too.
    let shutdown = shutdown_signal()?;
    let Webhooks {
        layer,
        purge,
        payments,
    } = webhooks(config.secret.clone(), &config.store_url).await?;
    serve(
        app_with_payments(layer.clone(), payments),
        &config,
        shutdown,
    )
    .await?;
    Ok(finish(&layer, purge).await)
}

/// `RUST_LOG`, or `info` with the layer's `debug` events.
pub fn log_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sangho_webhook=debug".into())
}

/// The settings read from the environment (the table above).
pub struct Config {
    /// `SANGHO_WEBHOOK_SECRET`.
    pub secret: Secret,
    /// `SANGHO_WEBHOOK_ADDR`.
    pub address: SocketAddr,
    /// `SANGHO_STORE_URL`.
    pub store_url: String,
}

impl Config {
    /// Reads the environment; a secret that cannot work or an unparsable address is an error.
    pub fn from_env() -> Result<Self, Box<dyn Error>> {
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
        let address = std::env::var("SANGHO_WEBHOOK_ADDR")
            .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
            .parse()?;
        let store_url = std::env::var("SANGHO_STORE_URL")
            .ok()
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| "sqlite://sangho-webhooks.db".to_owned());
        Ok(Self {
            secret,
            address,
            store_url,
        })
    }
}

/// Serves `app` at the configured address until `shutdown` completes (see
/// [`shutdown_signal`]), then stops accepting and lets the requests in progress finish.
pub async fn serve(
    app: Router,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.address).await?;
    let address = listener.local_addr()?;
    let store = loggable_url(&config.store_url);
    tracing::info!(%address, %store, "listening on POST /webhooks/sangho");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Once the server has stopped: [`drain`]s the webhook layer (the one on the app's route,
/// or a clone of it), stops the purge task, and answers the drain's exit status.
pub async fn finish(webhooks: &SanghoWebhookLayer, purge: Option<PurgeTask>) -> ExitCode {
    let status = drain(webhooks).await;
    if let Some(purge) = purge {
        purge.stop().await;
    }
    status
}

/// The store URL as the log shows it: its scheme, host, port and path. The user name and
/// password (`user:password@`), the query (`?user=…&password=…`, `?sslpassword=…`) and the
/// fragment are left out, so that the log never holds a credential. A URL whose parts cannot
/// be told apart (an `@` after a `?` or `#`) shows its scheme only.
pub fn loggable_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some(parts) => parts,
        None => match url.split_once(':') {
            // `memory:`, `sqlite:file.db`: no authority to hide a password in.
            Some((_, rest)) if !rest.contains(['@', '?', '#']) => return url.to_owned(),
            Some((scheme, _)) => return format!("{scheme}:…"),
            None => return "…".to_owned(),
        },
    };
    let (before_query, query) = match rest.find(['?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if query.contains('@') {
        // A password with an unencoded `?` or `#`, or an `@` in the query: where the password
        // ends is a guess, so nothing after the scheme is shown.
        return format!("{scheme}://…");
    }
    let host_and_path = match before_query.rfind('@') {
        Some(at) => &before_query[at + 1..],
        None => before_query,
    };
    format!("{scheme}://{host_and_path}")
}
