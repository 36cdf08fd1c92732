//! A webhook receiver over a SQL idempotency store: a pool built by hand, `migrate()`, the
//! purge task, and a graceful shutdown that stops the purge and closes the pool.
//!
//! ```sh
//! cargo run -p sangho-webhook-sqlx --example store                        # SQLite file
//! SANGHO_STORE_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo run -p sangho-webhook-sqlx --example store                    # PostgreSQL
//! ```
//!
//! | variable | default |
//! | --- | --- |
//! | `SANGHO_STORE_URL` | `sqlite://sangho-webhooks.db` (created if missing) |
//! | `SANGHO_WEBHOOK_SECRET` | `whsec_development_only` (development only) |
//! | `SANGHO_WEBHOOK_ADDR` | `127.0.0.1:3000` |
//!
//! It serves `POST /webhooks/sangho`. Ctrl-C (or SIGTERM) stops it: the server lets the
//! deliveries under way finish (so their claims are completed or released), then the purge
//! task stops and the pool closes.

use std::{error::Error, net::SocketAddr, time::Duration};

use axum::{Extension, Router, http::StatusCode, routing::post};
use sangho_webhook::{SanghoEvent, SanghoWebhookLayer, signature::Secret, store::IdempotencyStore};
use sangho_webhook_sqlx::{
    PostgresStore, Purge, PurgeTask, SqliteStore,
    sqlx::{postgres::PgPoolOptions, sqlite::SqlitePoolOptions},
};
use tracing_subscriber::EnvFilter;

/// How long completed events are remembered: more than the provider's 48-hour redelivery
/// window.
const RETENTION: Duration = Duration::from_secs(72 * 3600);
/// How often the purge runs.
const PURGE_PERIOD: Duration = Duration::from_secs(3600);
/// How long an operation waits for a pooled connection: below the layer's store timeout, so
/// that a database that is down gives a prompt 503.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let url = std::env::var("SANGHO_STORE_URL")
        .unwrap_or_else(|_| "sqlite://sangho-webhooks.db".to_owned());
    let secret = Secret::new(
        std::env::var("SANGHO_WEBHOOK_SECRET")
            .unwrap_or_else(|_| "whsec_development_only".to_owned()),
    )?;
    let address: SocketAddr = std::env::var("SANGHO_WEBHOOK_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
        .parse()?;

    if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(&url)
            .await?;
        let store = PostgresStore::new(pool.clone());
        store.migrate().await?;
        serve(address, secret, store).await?;
        pool.close().await;
    } else {
        let pool = SqlitePoolOptions::new()
            .max_connections(SqliteStore::MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(SqliteStore::connect_options(&url)?)
            .await?;
        let store = SqliteStore::new(pool.clone());
        store.migrate().await?;
        serve(address, secret, store).await?;
        // Closing the pool checkpoints the WAL into the database file.
        pool.close().await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Serves the webhook endpoint over `store` until Ctrl-C or SIGTERM, with the purge running.
async fn serve<S>(address: SocketAddr, secret: Secret, store: S) -> std::io::Result<()>
where
    S: IdempotencyStore + Purge,
{
    let purge = PurgeTask::spawn(store.clone(), RETENTION, PURGE_PERIOD);
    let layer = SanghoWebhookLayer::builder(secret, store)
        .with_retention(RETENTION)
        .build()
        .expect("valid settings");
    let app = Router::new()
        .route("/webhooks/sangho", post(handle))
        .layer(layer);

    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(%address, "listening on POST /webhooks/sangho");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await?;
    purge.stop().await;
    Ok(())
}

/// Runs once per event: the layer has verified it and claimed it.
async fn handle(Extension(event): Extension<SanghoEvent>) -> StatusCode {
    tracing::info!(id = event.id(), r#type = event.event_type(), "processing");
    StatusCode::OK
}

/// Resolves on Ctrl-C or, on Unix, SIGTERM.
async fn shutdown() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutting down: finishing the deliveries under way");
}
