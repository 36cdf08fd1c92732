//! PostgreSQL: [`PostgresStore`](crate::PostgresStore).

use std::time::Duration;

use sqlx::{
    AssertSqlSafe, Connection, Executor, PgPool,
    error::DatabaseError,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use super::{Dialect, Sealed, has_store_columns, micros, refuse_unusable, sealed::Templates};
use crate::{Error, SqlStore, TableName, queries::statement};

/// The PostgreSQL dialect (feature `postgres`): [`PostgresStore`](crate::PostgresStore).
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

/// The table's columns (none: no table).
const COLUMNS: &str = include_str!("../../queries/postgres/columns.sql");

/// Whether both indexes exist.
const INDEXES: &str = include_str!("../../queries/postgres/indexes.sql");

/// The isolation level of the store's own connections.
const SESSION: &str = include_str!("../../queries/postgres/session.sql");

/// Serialises concurrent `migrate()` calls, waiting at most [`MIGRATION_LOCK_TIMEOUT`].
const MIGRATION_LOCK: &str = include_str!("../../queries/postgres/migration_lock.sql");

/// The lock timeout and the log level of the migration script's run.
const UPGRADE_SETTINGS: &str = include_str!("../../queries/postgres/upgrade_settings.sql");

/// How long a migration waits for another replica's migration.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The table's columns, in lower case.
async fn columns<'c, E>(executor: E, table: &TableName) -> Result<Vec<String>, sqlx::Error>
where
    E: Executor<'c, Database = sqlx::Postgres>,
{
    sqlx::query_scalar(AssertSqlSafe(statement(COLUMNS)))
        .bind(table.as_str())
        .fetch_all(executor)
        .await
}

impl Dialect for Postgres {
    type Database = sqlx::Postgres;
}

impl Sealed for Postgres {
    const MAX_CONNECTIONS: u32 = 16;
    const SQL: Templates = Templates {
        claim: include_str!("../../queries/postgres/claim.sql"),
        claim_binds: &[0, 1, 2, 3],
        state: None,
        renew: include_str!("../../queries/postgres/renew.sql"),
        complete: include_str!("../../queries/postgres/complete.sql"),
        release: include_str!("../../queries/postgres/release.sql"),
        purge: &[include_str!("../../queries/postgres/purge.sql")],
        adopt: &[],
        cron_purge: include_str!("../../queries/postgres/cron_purge.sql"),
        schema: include_str!("../../migrations/postgres.sql"),
    };

    fn is_conflict(error: &dyn DatabaseError) -> bool {
        // serialization_failure, deadlock_detected
        matches!(error.code().as_deref(), Some("40001" | "40P01"))
    }

    async fn migrate(store: &SqlStore<Self>) -> Result<(), Error> {
        let table = store.table();
        // Up to date: no lock at all (`ALTER TABLE` and `CREATE INDEX` would take one, even
        // with `IF NOT EXISTS`).
        let present = columns(store.pool(), table).await?;
        refuse_unusable(table, &present)?;
        let indexed: bool = sqlx::query_scalar(AssertSqlSafe(statement(INDEXES)))
            .bind(table.index_name())
            .bind(table.expiry_index_name())
            .fetch_one(store.pool())
            .await?;
        if has_store_columns(&present) && indexed {
            return Ok(());
        }
        let mut transaction = store.pool().begin().await?;
        match transaction.execute(sqlx::raw_sql(MIGRATION_LOCK)).await {
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("55P03") => {
                return Err(Error::MigrationLocked {
                    table: table.as_str().to_owned(),
                    waited: MIGRATION_LOCK_TIMEOUT,
                });
            }
            other => other?,
        };
        // Another replica may have migrated meanwhile: look again, under the lock.
        refuse_unusable(table, &columns(&mut *transaction, table).await?)?;
        transaction.execute(sqlx::raw_sql(UPGRADE_SETTINGS)).await?;
        let script = store.schema().replace(
            "INTERVAL '72 hours'",
            &format!(
                "INTERVAL '{} microseconds'",
                micros(store.adopted_retention())
            ),
        );
        transaction
            .execute(sqlx::raw_sql(AssertSqlSafe(script)))
            .await?;
        transaction.commit().await?;
        Ok(())
    }

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let [purge] = &store.queries().purge[..] else {
            unreachable!("one purge file")
        };
        let (select, settings) = purge.split_last().expect("the purge's statements");
        let mut transaction = store.pool().begin().await?;
        transaction
            .execute(sqlx::raw_sql(AssertSqlSafe(settings.join(";\n"))))
            .await?;
        let deleted: i64 = sqlx::query_scalar(AssertSqlSafe(select.clone()))
            .bind(i64::try_from(batch).unwrap_or(i64::MAX))
            .bind(micros(retention))
            .fetch_one(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(u64::try_from(deleted).unwrap_or(0))
    }
}

/// [`PostgresStore`](crate::PostgresStore)'s own constructor and settings.
impl SqlStore<Postgres> {
    /// How long a connection of [`connect`](Self::connect)'s pool must have been idle for the
    /// pool to check it (a ping, one round trip) before handing it out.
    pub const IDLE_BEFORE_PING: Duration = Duration::from_secs(1);

    /// Connects to `url` (`postgres://user:password@host:port/database`) with a pool of at most
    /// [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections and an acquire (and connect)
    /// timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT), and opens one connection to check
    /// the URL. The pool checks (pings) a connection before handing it out only when it has
    /// been idle for [`IDLE_BEFORE_PING`](Self::IDLE_BEFORE_PING) or longer, not before every
    /// statement as sqlx's default does. Each connection runs at READ COMMITTED, whatever the
    /// database's or the role's `default_transaction_isolation`: the isolation the statements
    /// are written for, under which concurrent claims wait for each other instead of failing.
    ///
    /// On a pool of your own ([`new`](SqlStore::new)) the store leaves the session alone; a
    /// claim that a stricter isolation level aborts (a serialization failure, SQLSTATE 40001,
    /// or a deadlock, 40P01) lost a race for the event and is answered as in flight (409), never
    /// as a store failure.
    ///
    /// TLS: enable one of sqlx's `tls-*` features in your own `sqlx` dependency (at this
    /// crate's version) and add `sslmode=require` to the URL.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid or the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options: PgConnectOptions = url.parse()?;
        let pool: PgPool = PgPoolOptions::new()
            .max_connections(Self::MAX_CONNECTIONS)
            .acquire_timeout(Self::ACQUIRE_TIMEOUT)
            // sqlx's default (`test_before_acquire`) pings every connection it takes from the
            // idle queue: one more round trip before each statement, which under load cost the
            // store 7 % to 24 % of its requests/s over HTTP (BENCHMARKS.md, section 5). A
            // connection in steady use has just answered its previous statement; one that sat
            // idle may have been dropped by the server or a proxy meanwhile, so it is still
            // checked (and replaced when dead), as before.
            .test_before_acquire(false)
            .before_acquire(|connection, metadata| {
                Box::pin(async move {
                    if metadata.idle_for >= Self::IDLE_BEFORE_PING {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(|connection, _| {
                Box::pin(async move {
                    connection
                        .execute(AssertSqlSafe(statement(SESSION)))
                        .await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        Ok(Self::new(pool))
    }

    /// Whether claims and renewals are committed asynchronously (`true`) instead of durably
    /// (`false`, the default).
    ///
    /// By default claims, renewals and completions are committed with the session's
    /// `synchronous_commit` (`on` unless you changed it): each waits until the database has
    /// flushed it to disk. Releases are always committed asynchronously: losing one only makes
    /// the next delivery wait for the lease.
    ///
    /// With asynchronous claims, the claim and renew statements set `synchronous_commit = off`
    /// for their own transaction only (`set_config(…, true)` in the statement: still one round
    /// trip), which saves one disk flush per event. They are visible to every other session at
    /// once, so concurrent deliveries are deduplicated as usual; but a crash *of the database
    /// server* (power loss, kill -9 or an out-of-memory kill of any backend, which restarts
    /// them all) loses the claims and renewals of the last moments before it: up to three
    /// times `wal_writer_delay` (200 ms by default). A handler running under a lost claim
    /// keeps running while the next delivery of the event can acquire it again, so **the event
    /// can be processed twice**. Opt in only where a rare double after a database crash is
    /// acceptable.
    #[must_use]
    pub fn with_asynchronous_claims(self, asynchronous: bool) -> Self {
        self.set_synchronous_claims(!asynchronous)
    }

    /// How long a claim or a renewal waits for a lock held by another transaction (the event's
    /// row, the table) before it fails; the default is
    /// [`LOCK_TIMEOUT`](SqlStore::LOCK_TIMEOUT), 2 s. Whole milliseconds, rounded up.
    ///
    /// The claim and renew statements set `lock_timeout` for their own transaction, inside the
    /// statement (`set_config('lock_timeout', …, true)`): still one round trip, on a pool of
    /// your own as on [`connect`](Self::connect)'s, and the session's `lock_timeout` is left
    /// as it is for every other statement, your transactions included.
    ///
    /// Keep it below the layer's store timeout minus the pool's acquire timeout (5 s − 3 s
    /// with the defaults): a claim the layer gave up on while it waited for a lock would
    /// otherwise land after the layer released it, and block the event with 409 for a lease
    /// (see [Lock waits](SqlStore#lock-waits)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sangho_webhook_sqlx::{PostgresStore, sqlx::postgres::PgPoolOptions};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let pool = PgPoolOptions::new().connect_lazy("postgres://localhost/app").unwrap();
    /// // With a layer built `.with_store_timeout(Duration::from_secs(2))` and a pool whose
    /// // acquire timeout is 1 s:
    /// let store = PostgresStore::new(pool).with_lock_timeout(Duration::from_millis(800));
    /// # drop(store);
    /// # });
    /// ```
    #[must_use]
    pub fn with_lock_timeout(self, timeout: Duration) -> Self {
        self.set_lock_timeout(timeout)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_migration_lock_waits_for_its_timeout() {
        let wait = format!(
            "SET LOCAL lock_timeout = '{}ms'",
            super::MIGRATION_LOCK_TIMEOUT.as_millis()
        );
        assert!(super::MIGRATION_LOCK.contains(&wait));
    }
}
