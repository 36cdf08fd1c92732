//! PostgreSQL: [`PostgresStore`](crate::PostgresStore).

use std::time::Duration;

use sqlx::{
    AssertSqlSafe, Connection, Executor, PgPool,
    error::DatabaseError,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use super::{Dialect, Statements, has_store_columns, micros, refuse_unusable, sealed::Sealed};
use crate::{Error, SqlStore, TableName};

/// The PostgreSQL dialect (feature `postgres`): [`PostgresStore`](crate::PostgresStore).
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

impl Sealed for Postgres {}

/// Claim in one statement. `settings` sets the statement's own commit mode and lock timeout
/// before the insert reads its row. The CTE inserts the claim, or takes over a row whose lease
/// (or retention) has expired; when it did neither, the outer `SELECT` tells completed from in
/// flight. A row committed by a concurrent claim after this statement's snapshot is not seen by
/// that `SELECT`: then no row comes back, which means in flight (the safe answer, a 409).
const CLAIM: &str = "\
WITH settings AS (SELECT {commit}, {lock_timeout}),
acquired AS (
    INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
    SELECT $1, $2, statement_timestamp(), 'in_flight', $3,
           statement_timestamp() + $4 * INTERVAL '1 microsecond'
    FROM settings
    ON CONFLICT (event_id) DO UPDATE
        SET event_type = EXCLUDED.event_type,
            processed_at = EXCLUDED.processed_at,
            state = 'in_flight',
            claim_token = EXCLUDED.claim_token,
            expires_at = EXCLUDED.expires_at
        WHERE e.expires_at <= statement_timestamp()
    RETURNING 1
)
SELECT 'acquired' FROM acquired
UNION ALL
SELECT CASE
           WHEN e.state = 'completed'
                AND (e.expires_at IS NULL OR e.expires_at > statement_timestamp())
           THEN 'completed'
           ELSE 'in_flight'
       END
FROM {table} AS e
WHERE e.event_id = $1 AND NOT EXISTS (SELECT 1 FROM acquired)";

/// Renew in one statement: extend the token's live claim, or record it again when the event has
/// no live record. A live completion by the token is rewritten unchanged (the row comes back:
/// `true`); another owner's live record is left alone (no row: `false`). `settings` as in
/// [`CLAIM`].
const RENEW: &str = "\
WITH settings AS (SELECT {commit}, {lock_timeout})
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
SELECT $1, $2, statement_timestamp(), 'in_flight', $3,
       statement_timestamp() + $4 * INTERVAL '1 microsecond'
FROM settings
ON CONFLICT (event_id) DO UPDATE
    SET event_type = CASE WHEN e.expires_at <= statement_timestamp()
                          THEN EXCLUDED.event_type ELSE e.event_type END,
        processed_at = CASE WHEN e.expires_at <= statement_timestamp()
                            THEN EXCLUDED.processed_at ELSE e.processed_at END,
        state = CASE WHEN e.expires_at <= statement_timestamp()
                     THEN 'in_flight' ELSE e.state END,
        claim_token = EXCLUDED.claim_token,
        expires_at = CASE WHEN e.state = 'completed' AND e.expires_at > statement_timestamp()
                          THEN e.expires_at ELSE EXCLUDED.expires_at END
    WHERE e.claim_token = $3 OR e.expires_at <= statement_timestamp()
RETURNING claim_token";

/// Complete in one statement: record the event as completed by the token unless another owner
/// holds or completed it (a live record with another token). When the token's own record is
/// live, `processed_at` is kept (and so its index entry).
const COMPLETE: &str = "\
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES ($1, $2, statement_timestamp(), 'completed', $3,
        statement_timestamp() + $4 * INTERVAL '1 microsecond')
ON CONFLICT (event_id) DO UPDATE
    SET event_type = CASE WHEN e.expires_at <= statement_timestamp()
                          THEN EXCLUDED.event_type ELSE e.event_type END,
        processed_at = CASE WHEN e.expires_at <= statement_timestamp()
                            THEN EXCLUDED.processed_at ELSE e.processed_at END,
        state = 'completed',
        claim_token = EXCLUDED.claim_token,
        expires_at = EXCLUDED.expires_at
    WHERE e.claim_token = $3 OR e.expires_at <= statement_timestamp()
RETURNING claim_token";

const RELEASE: &str = "\
WITH commit_mode AS (SELECT {commit})
DELETE FROM {table} USING commit_mode
WHERE event_id = $1 AND state = 'in_flight' AND claim_token = $2
  AND expires_at > statement_timestamp()
RETURNING claim_token";

const STATE: &str = "SELECT state FROM {table} WHERE event_id = $1";

/// One purge batch, in a transaction of its own: the rows past their own expiry, then the rows
/// without one (written by another tool) claimed more than `$2` µs ago. `SKIP LOCKED`: a row
/// a claim is taking over right now is left for the next purge, so no claim ever waits for
/// the purge's row locks.
const PURGE: &str = "\
SET LOCAL statement_timeout = '10s';
SET LOCAL lock_timeout = '1s';
WITH expired AS (
    DELETE FROM {table} WHERE event_id IN (
        SELECT event_id FROM {table}
        WHERE expires_at <= statement_timestamp()
        LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING 1
), unexpiring AS (
    DELETE FROM {table} WHERE event_id IN (
        SELECT event_id FROM {table}
        WHERE expires_at IS NULL
          AND processed_at < CAST(statement_timestamp() - $2 * INTERVAL '1 microsecond' AS TIMESTAMP)
        LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT (SELECT count(*) FROM expired) + (SELECT count(*) FROM unexpiring)";

/// The table's columns (none: no table).
const COLUMNS: &str = "\
SELECT attname::text FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped";

/// Whether both indexes exist.
const INDEXES: &str = "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL";

/// How long a migration waits for another replica's migration.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the upgrade of a table waits for its lock: `ALTER TABLE` needs an exclusive lock,
/// and every claim that arrives while it waits queues behind it.
const UPGRADE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '2s'";

/// The isolation level of the store's own connections.
const READ_COMMITTED: &str =
    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// Serialises concurrent `migrate()` calls (several replicas starting at once): `CREATE TABLE
/// IF NOT EXISTS` alone can fail when two sessions race.
const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(7310575268310339689)";

/// The table's columns, in lower case.
async fn columns<'c, E>(executor: E, table: &TableName) -> Result<Vec<String>, sqlx::Error>
where
    E: Executor<'c, Database = sqlx::Postgres>,
{
    sqlx::query_scalar(COLUMNS)
        .bind(table.as_str())
        .fetch_all(executor)
        .await
}

impl Dialect for Postgres {
    type Database = sqlx::Postgres;
    const MAX_CONNECTIONS: u32 = 16;
    const STATEMENTS: Statements = Statements {
        // Lowers `synchronous_commit` for the statement's own (implicit) transaction only.
        asynchronous_commit: "set_config('synchronous_commit', 'off', true)",
        // For the statement's own (implicit) transaction only, and read when a lock wait
        // starts: every lock the statement waits for (the row, a concurrent inserter's
        // transaction, the table) is bounded.
        lock_timeout: "set_config('lock_timeout', '{milliseconds}ms', true)",
        claim_binds: &[0, 1, 2, 3],
        claim: CLAIM,
        renew: RENEW,
        complete: COMPLETE,
        release: RELEASE,
        state: STATE,
    };
    const SCHEMA: &'static str = include_str!("../../migrations/postgres.sql");
    const READS_STATE_OF_A_DUPLICATE: bool = false;

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
        let indexed: bool = sqlx::query_scalar(INDEXES)
            .bind(table.index_name())
            .bind(table.expiry_index_name())
            .fetch_one(store.pool())
            .await?;
        if has_store_columns(&present) && indexed {
            return Ok(());
        }
        let mut transaction = store.pool().begin().await?;
        transaction
            .execute(AssertSqlSafe(format!(
                "SET LOCAL lock_timeout = '{}ms'",
                MIGRATION_LOCK_TIMEOUT.as_millis()
            )))
            .await?;
        match transaction.execute(MIGRATION_LOCK).await {
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
        transaction.execute(UPGRADE_LOCK_TIMEOUT).await?;
        // "already exists, skipping" notices are the normal case: keep them out of the logs.
        transaction
            .execute("SET LOCAL client_min_messages = warning")
            .await?;
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

    const CRON_PURGE: &'static str = "\
DELETE FROM processed_webhook_events WHERE event_id IN (
    SELECT event_id FROM processed_webhook_events
    WHERE expires_at <= now()
    LIMIT 1000 FOR UPDATE SKIP LOCKED);";

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let mut statements = store.table().sql(PURGE).to_string();
        let select = statements.split_off(statements.find("WITH").unwrap_or(0));
        let mut transaction = store
            .pool()
            .begin_with("BEGIN ISOLATION LEVEL READ COMMITTED")
            .await?;
        transaction
            .execute(sqlx::raw_sql(AssertSqlSafe(statements)))
            .await?;
        let deleted: i64 = sqlx::query_scalar(AssertSqlSafe(select))
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
                    connection.execute(READ_COMMITTED).await?;
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
