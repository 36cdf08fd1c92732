//! The idempotency store a `SANGHO_STORE_URL` names.

use std::{process::ExitCode, sync::Arc, time::Duration};

use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
use sangho_webhook_redis::RedisStore;
use sangho_webhook_sqlx::{PostgresStore, PurgeTask, SqliteStore};

use crate::{BoxError, drain, loggable_url};

/// How often the SQL stores delete completed events older than the retention.
pub const PURGE_PERIOD: Duration = Duration::from_secs(3600);

/// The store a URL names.
///
/// | URL | store |
/// | --- | --- |
/// | `sqlite://FILE` | `SqliteStore` on FILE (created if missing): durable, one server |
/// | `postgres://…` | `PostgresStore`: durable, shared by every replica |
/// | `redis://…` | `RedisStore`: shared by every replica, completed events expire by themselves |
/// | `memory:` | `MokaStore`: forgotten on restart, one process only |
#[derive(Clone, Debug)]
pub enum Store {
    /// `sqlite:`.
    Sqlite(SqliteStore),
    /// `postgres:` or `postgresql:`.
    Postgres(PostgresStore),
    /// `redis:` or `rediss:`.
    Redis(RedisStore),
    /// `memory:`.
    Memory(Arc<MokaStore>),
}

impl Store {
    /// Connects to the store `url` names; migrates a SQL store. The log shows where the store
    /// is (see [`loggable_url`]), never its credentials.
    pub async fn connect(url: &str) -> Result<Self, BoxError> {
        tracing::info!(store = %loggable_url(url), "opening the idempotency store");
        let store = if url.starts_with("sqlite:") {
            let store = SqliteStore::connect(url).await?;
            store.migrate().await?;
            Self::Sqlite(store)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let store = PostgresStore::connect(url).await?;
            store.migrate().await?;
            Self::Postgres(store)
        } else if url.starts_with("redis:") || url.starts_with("rediss:") {
            Self::Redis(RedisStore::connect(url).await?)
        } else if url == "memory:" {
            tracing::warn!("memory: store: events are forgotten on restart and not shared");
            Self::Memory(Arc::new(MokaStore::new()))
        } else {
            return Err(format!(
                "unsupported SANGHO_STORE_URL {:?}: use sqlite://, postgres://, redis:// or memory:",
                loggable_url(url)
            )
            .into());
        };
        Ok(store)
    }

    /// The layer over this store (the default settings) and, for a SQL store, its purge task,
    /// deleting completed events past the retention every [`PURGE_PERIOD`].
    pub fn webhooks(self, secret: Secret) -> Webhooks {
        let retention = SanghoWebhookLayer::DEFAULT_RETENTION;
        let (layer, purge) = match self {
            Self::Sqlite(store) => {
                let purge = store.spawn_purge(retention, PURGE_PERIOD);
                (SanghoWebhookLayer::new(secret, store), Some(purge))
            }
            Self::Postgres(store) => {
                let purge = store.spawn_purge(retention, PURGE_PERIOD);
                (SanghoWebhookLayer::new(secret, store), Some(purge))
            }
            Self::Redis(store) => (SanghoWebhookLayer::new(secret, store), None),
            Self::Memory(store) => (SanghoWebhookLayer::new(secret, store), None),
        };
        Webhooks { layer, purge }
    }
}

/// The webhook layer and the purge task beside it.
#[derive(Debug)]
pub struct Webhooks {
    /// The layer over the store.
    pub layer: SanghoWebhookLayer,
    /// The purge task of a SQL store.
    pub purge: Option<PurgeTask>,
}

impl Webhooks {
    /// Once the server has stopped: [`drain`]s the layer, stops the purge task, and answers
    /// the drain's exit status.
    pub async fn finish(self) -> ExitCode {
        let status = drain(&self.layer).await;
        if let Some(purge) = self.purge {
            purge.stop().await;
        }
        status
    }
}
