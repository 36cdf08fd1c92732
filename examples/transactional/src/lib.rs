//! The transactional example's application: each `payment_intent.succeeded` event is recorded
//! in a `payments` table (one row per event id) **in one transaction with the event's
//! completion** (`SqlStore::complete_in`): a crash after the commit leaves the payment and the
//! completed event together, so the provider's redelivery is a duplicate, never a second
//! payment. The binary (`src/main.rs`) serves it.

use axum::{Extension, Json, Router, http::StatusCode, routing::post};
use sangho_example_axum::WEBHOOK_PATH;
use sangho_examples_support::Store;
use sangho_webhook::{SanghoEvent, SanghoWebhookLayer};
use sangho_webhook_sqlx::{CompleteInError, PostgresStore, SqliteStore, sqlx};
use serde_json::{Value, json};

/// The `payments` table, in the database of the SQL store the layer runs on (the same store
/// value: its `complete_in` joins the handler's transaction).
#[derive(Clone, Debug)]
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
    /// The table in `store`'s database, for a SQL store (`None` for Redis and memory, which
    /// cannot join a database transaction).
    pub fn of(store: &Store) -> Option<Self> {
        match store {
            Store::Sqlite(store) => Some(Self::Sqlite(store.clone())),
            Store::Postgres(store) => Some(Self::Postgres(store.clone())),
            Store::Redis(_) | Store::Memory(_) => None,
        }
    }

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

/// The handler: a `payment_intent.succeeded` is recorded with its completion in one
/// transaction. If that fails (the database, or this delivery's claim was taken over by
/// another one), nothing was committed: answer 500, and the provider's next delivery finds the
/// event processed by the other delivery, or processes it.
async fn handle(
    Extension(payments): Extension<Payments>,
    event: SanghoEvent,
) -> Result<Json<Value>, (StatusCode, Json<Value>)> {
    tracing::info!(
        id = event.id(),
        kind = event.event_type(),
        "processing webhook event"
    );
    if event.event_type() == "payment_intent.succeeded" {
        if let Err(error) = payments.record(&event).await {
            tracing::warn!(id = event.id(), %error, "payment not recorded; rolled back");
            let error = Json(json!({ "error": "payment_not_recorded" }));
            return Err((StatusCode::INTERNAL_SERVER_ERROR, error));
        }
        tracing::info!(
            id = event.id(),
            "payment recorded with the event's completion"
        );
    }
    Ok(Json(json!({ "received": true })))
}

/// The webhook route, the layer on its `POST` alone (`route_layer`), whose handler records
/// payments in `payments` (the database of the layer's SQL store).
pub fn app(webhooks: SanghoWebhookLayer, payments: Payments) -> Router {
    let route = post(handle)
        .route_layer(webhooks)
        .layer(Extension(payments));
    Router::new().route(WEBHOOK_PATH, route)
}
