//! [`PostgresStore`]: the idempotency store over PostgreSQL.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore, StoreError};
use sqlx::{
    AssertSqlSafe, Database, Executor, PgPool, Postgres,
    postgres::{PgConnectOptions, PgPoolOptions},
    query::Query,
};

use crate::{
    Error, TableName,
    claim::Queries,
    error::{seconds, store_error},
    purge::Purge,
};

/// The schema, for the default table: `migrations/postgres.sql`.
pub(crate) const SCHEMA: &str = include_str!("../migrations/postgres.sql");

/// Claim in one statement. The CTE inserts the claim, or takes over a row whose lease (or
/// retention) has expired; when it did neither, the outer `SELECT` tells completed from in
/// flight. A row committed by a concurrent claim after this statement's snapshot is not seen by
/// that `SELECT`: then no row comes back, which means in flight (the safe answer, a 409).
///
/// `{commit}` is where the statement may lower its own transaction's `synchronous_commit`
/// (see [`PostgresStore::with_synchronous_claims`]).
const CLAIM: &str = "\
WITH commit_mode AS (SELECT {commit}),
acquired AS (
    INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
    SELECT $1, $2, statement_timestamp(), 'in_flight', $3,
           statement_timestamp() + $4 * INTERVAL '1 second'
    FROM commit_mode
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

/// Lowers `synchronous_commit` for the statement's own (implicit) transaction only.
const ASYNC_COMMIT: &str = "set_config('synchronous_commit', 'off', true)";
/// Leaves the session's `synchronous_commit` as it is.
const SESSION_COMMIT: &str = "NULL";

/// Renew in one statement: extend the token's live claim, or record it again when the event has
/// no live record. A live completion by the token is rewritten unchanged (so the statement
/// reports one row: `true`); another owner's live record is left alone (no row: `false`).
const RENEW: &str = "\
WITH commit_mode AS (SELECT {commit})
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
SELECT $1, $2, statement_timestamp(), 'in_flight', $3,
       statement_timestamp() + $4 * INTERVAL '1 second'
FROM commit_mode
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
    WHERE e.claim_token = $3 OR e.expires_at <= statement_timestamp()";

/// Complete in one statement: record the event as completed by the token unless another owner
/// holds or completed it (a live record with another token). When the token's own record is
/// live, `processed_at` is kept, so only columns no index covers change: a HOT update (see
/// `migrations/postgres.sql`).
const COMPLETE: &str = "\
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES ($1, $2, statement_timestamp(), 'completed', $3,
        statement_timestamp() + $4 * INTERVAL '1 second')
ON CONFLICT (event_id) DO UPDATE
    SET event_type = CASE WHEN e.expires_at <= statement_timestamp()
                          THEN EXCLUDED.event_type ELSE e.event_type END,
        processed_at = CASE WHEN e.expires_at <= statement_timestamp()
                            THEN EXCLUDED.processed_at ELSE e.processed_at END,
        state = 'completed',
        claim_token = EXCLUDED.claim_token,
        expires_at = EXCLUDED.expires_at
    WHERE e.claim_token = $3 OR e.expires_at <= statement_timestamp()";

const RELEASE: &str = "\
WITH commit_mode AS (SELECT {commit})
DELETE FROM {table} USING commit_mode
WHERE event_id = $1 AND state = 'in_flight' AND claim_token = $2
  AND expires_at > statement_timestamp()";

/// Every row claimed more than the retention ago, but a live claim. The cut-off is cast to the
/// column's type (`TIMESTAMP`), so that the `processed_at` index applies.
const PURGE: &str = "\
DELETE FROM {table}
WHERE processed_at < CAST(statement_timestamp() - $1 * INTERVAL '1 second' AS TIMESTAMP)
  AND (state = 'completed' OR expires_at <= statement_timestamp())";

/// Whether the table has the store's columns and the index already: then `migrate` takes no
/// lock at all (`ALTER TABLE` and `CREATE INDEX` would, even with `IF NOT EXISTS`).
const UP_TO_DATE: &str = "\
SELECT (SELECT count(*) FROM pg_attribute
        WHERE attrelid = to_regclass($1) AND NOT attisdropped
          AND attname IN ('state', 'claim_token', 'expires_at')) = 3
   AND to_regclass($2) IS NOT NULL";

/// Serialises concurrent `migrate()` calls (several replicas starting at once): `CREATE TABLE
/// IF NOT EXISTS` alone can fail when two sessions race.
const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(7310575268310339689)";

/// The statements for `table`, with claims and releases committed synchronously or not.
fn queries(table: &TableName, synchronous_claims: bool) -> Queries {
    let commit = if synchronous_claims {
        SESSION_COMMIT
    } else {
        ASYNC_COMMIT
    };
    Queries::new(
        table,
        [CLAIM, RENEW, COMPLETE, RELEASE, PURGE],
        &[("{commit}", commit)],
    )
}

/// The idempotency store over PostgreSQL (feature `postgres`): durable, and shared by every
/// replica that uses the same database.
///
/// ```no_run
/// use std::time::Duration;
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret};
/// use sangho_webhook_sqlx::PostgresStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
/// store.migrate().await?;
/// let purge = store.spawn_purge(Duration::from_secs(72 * 3600), Duration::from_secs(3600));
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_…")?, store);
/// // … serve with the layer; on shutdown:
/// purge.stop().await;
/// # Ok(()) }
/// ```
///
/// # How it works
///
/// The table (default `processed_webhook_events`, see [`TableName`]) keeps the seed's columns
/// and adds three; create it with [`migrate`](Self::migrate) or `migrations/postgres.sql`:
///
/// | column | meaning |
/// | --- | --- |
/// | `event_id`, `event_type` | the event (primary key, and its type for operators) |
/// | `processed_at` | when the event was last claimed: the arrival of the delivery that processed it (indexed, for the purge) |
/// | `state` | `in_flight` or `completed` |
/// | `claim_token` | the owner of the claim |
/// | `expires_at` | in flight: the end of the lease; completed: the end of the retention |
///
/// Each operation is one statement, so one round trip:
///
/// - **claim**: `INSERT … ON CONFLICT (event_id) DO UPDATE … WHERE <the row's expiry has
///   passed> RETURNING …`, wrapped in a CTE that tells a completed event from one in flight in
///   the same statement. Atomic and race-free: among any number of concurrent claims of one
///   event, exactly one is acquired.
/// - **renew**: the same upsert, taken only when the row is the token's or no longer live:
///   extends the token's lease, or records its claim again.
/// - **complete**: the same upsert, recording the event as completed by the token unless
///   another owner's record is live. On the token's own live row it changes only `state`,
///   `claim_token` and `expires_at`, which no index covers, and the table's fillfactor leaves
///   room, so it is a HOT update: no index is written.
/// - **release**: a `DELETE` of the row, only if it is the token's live claim.
///
/// Completions are durable as the session commits them (by default: flushed to disk before
/// `complete` returns). Claims and releases are committed asynchronously by default, which
/// only a crash of the database server can tell apart (a lost claim acts as an expired lease):
/// see [`with_synchronous_claims`](Self::with_synchronous_claims).
///
/// Every timestamp is the database's `statement_timestamp()` (the time the statement
/// started, the same for the whole statement, never the transaction's start), so the clocks of
/// the replicas play no part.
///
/// Rows stay until [`purge`](Self::purge) removes them (run it on an interval with
/// [`spawn_purge`](Self::spawn_purge), or from cron).
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    table: TableName,
    synchronous_claims: bool,
    queries: Arc<Queries>,
}

impl PostgresStore {
    /// How long [`connect`](Self::connect)'s pool waits for a connection before an operation
    /// fails (with [`StoreError::Timeout`]): shorter than the layer's default store timeout.
    pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

    /// How many connections [`connect`](Self::connect)'s pool opens at most.
    pub const MAX_CONNECTIONS: u32 = 16;

    /// A store over `pool`, on the default table `processed_webhook_events`.
    ///
    /// Build the pool with this crate's re-exported [`sqlx`](crate::sqlx), and give it an
    /// [`acquire_timeout`](sqlx::pool::PoolOptions::acquire_timeout) shorter than the layer's
    /// store timeout, so that an unreachable database surfaces as a store error:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use sangho_webhook_sqlx::{PostgresStore, sqlx::postgres::PgPoolOptions};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = PgPoolOptions::new()
    ///     .max_connections(32)
    ///     .acquire_timeout(Duration::from_secs(2))
    ///     .connect("postgres://postgres@127.0.0.1:5432/app")
    ///     .await?;
    /// let store = PostgresStore::new(pool).with_table_name("shop_webhook_events")?;
    /// store.migrate().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(pool: PgPool) -> Self {
        let table = TableName::default();
        Self {
            queries: Arc::new(queries(&table, false)),
            pool,
            table,
            synchronous_claims: false,
        }
    }

    /// Connects to `url` (`postgres://user:password@host:port/database`) with a pool of at most
    /// [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections and an acquire (and connect)
    /// timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT), and opens one connection to check
    /// the URL.
    ///
    /// TLS: enable one of sqlx's `tls-*` features in your own `sqlx` dependency (at this
    /// crate's version) and add `sslmode=require` to the URL.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid or the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .max_connections(Self::MAX_CONNECTIONS)
            .acquire_timeout(Self::ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        Ok(Self::new(pool))
    }

    /// Uses the table `name` instead of `processed_webhook_events`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTableName`] if `name` is not a plain identifier (see [`TableName`]).
    pub fn with_table_name(self, name: impl Into<String>) -> Result<Self, Error> {
        Ok(self.with_table(TableName::new(name)?))
    }

    /// Uses the (already checked) table `table`.
    #[must_use]
    pub fn with_table(self, table: TableName) -> Self {
        Self {
            queries: Arc::new(queries(&table, self.synchronous_claims)),
            table,
            ..self
        }
    }

    /// Whether claims and releases wait for the database to flush them to disk (`true`), like
    /// completions always do, or are committed asynchronously (`false`, the default).
    ///
    /// By default the claim and release statements set `synchronous_commit = off` for their
    /// own transaction only (`set_config(…, true)` in the statement: still one round trip).
    /// They are visible to every other session at once, exactly as usual, so concurrent
    /// deliveries are deduplicated the same way; only a crash *of the database server* can
    /// lose the last fraction of a second of them. A lost claim is then a claim whose lease ran
    /// out early (the next delivery processes the event), a lost release a claim that waits
    /// for its lease. Completions are never lost: `complete` is committed with the session's
    /// setting (durable by default), and its flush also covers the claim before it. This
    /// halves the disk flushes per event (one, like the seed's recipe, instead of two).
    ///
    /// Pass `true` to make claims durable as well, e.g. when a handler must never run twice
    /// even across a database crash.
    #[must_use]
    pub fn with_synchronous_claims(self, synchronous: bool) -> Self {
        Self {
            queries: Arc::new(queries(&self.table, synchronous)),
            synchronous_claims: synchronous,
            ..self
        }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The schema script for this store's table: `migrations/postgres.sql` with the table and
    /// index names substituted. Run it with your own migration tool if you prefer.
    pub fn schema(&self) -> String {
        self.table.schema(SCHEMA)
    }

    /// Creates the table and its index if they are missing, and adds the store's columns to a
    /// table created with the seed's schema. Safe to call on every start, from several replicas
    /// at once (they take turns on an advisory lock); once the table is up to date it only
    /// reads the catalog, so it never waits for (or holds up) the traffic on the table.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database refuses (e.g. no `CREATE` privilege).
    pub async fn migrate(&self) -> Result<(), Error> {
        let up_to_date = || async {
            sqlx::query_scalar::<_, bool>(UP_TO_DATE)
                .bind(self.table.as_str())
                .bind(self.table.index_name())
                .fetch_one(&self.pool)
                .await
        };
        if up_to_date().await? {
            return Ok(());
        }
        let mut transaction = self.pool.begin().await?;
        transaction.execute(MIGRATION_LOCK).await?;
        // "already exists, skipping" notices are the normal case: keep them out of the logs.
        transaction
            .execute("SET LOCAL client_min_messages = warning")
            .await?;
        transaction
            .execute(sqlx::raw_sql(AssertSqlSafe(self.schema())))
            .await?;
        transaction.commit().await?;
        Ok(())
    }

    /// Deletes the rows claimed more than `retention` ago (their `processed_at`), except
    /// a claim whose lease still runs: the completed events past the retention, and the
    /// abandoned claims (their owner is gone) once they are that old. Answers how many rows it
    /// deleted. It scans the `processed_at` index, and runs as one statement.
    ///
    /// An abandoned claim younger than the retention stays until then: it is harmless, the
    /// next delivery of its event takes it over. Pass at least the provider's redelivery
    /// window (48 hours) as the retention; the layer's default is 72 hours.
    ///
    /// The same, as plain SQL for cron (`psql -c`), for the default table:
    ///
    /// ```sql
    /// DELETE FROM processed_webhook_events
    /// WHERE processed_at < CAST(now() - INTERVAL '72 hours' AS TIMESTAMP)
    ///   AND (state = 'completed' OR expires_at <= now());
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the statement fails.
    pub async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        let result = sqlx::query(AssertSqlSafe(self.queries.purge.clone()))
            .bind(seconds(retention))
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }

    /// Runs [`purge`](Self::purge)`(retention)` now and then every `period` on a background task
    /// until the returned [`PurgeTask`](crate::PurgeTask) is stopped or dropped.
    ///
    /// # Panics
    ///
    /// If called outside a Tokio runtime.
    pub fn spawn_purge(&self, retention: Duration, period: Duration) -> crate::PurgeTask {
        crate::PurgeTask::spawn(self.clone(), retention, period)
    }

    fn error(&self, error: sqlx::Error) -> StoreError {
        store_error(error, self.pool.options().get_acquire_timeout())
    }

    /// Runs an owner-checked statement (renew, complete, release): whether it wrote the
    /// claim's row.
    async fn owner_checked(
        &self,
        query: Query<'_, Postgres, <Postgres as Database>::Arguments>,
    ) -> Result<bool, StoreError> {
        let result = query
            .execute(&self.pool)
            .await
            .map_err(|error| self.error(error))?;
        Ok(result.rows_affected() == 1)
    }
}

impl Purge for PostgresStore {
    async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        PostgresStore::purge(self, retention).await
    }
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
    async fn claim(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let outcome: Option<(String,)> = sqlx::query_as(AssertSqlSafe(self.queries.claim.clone()))
            .bind(event_id)
            .bind(event_type)
            .bind(token.as_str())
            .bind(seconds(lease))
            .fetch_optional(&self.pool)
            .await
            .map_err(|error| self.error(error))?;
        match outcome.as_ref().map(|(outcome,)| outcome.as_str()) {
            Some("acquired") => Ok(Claim::Acquired),
            Some("completed") => Ok(Claim::Completed),
            Some("in_flight") | None => Ok(Claim::InFlight),
            Some(other) => Err(StoreError::Protocol(format!(
                "unexpected claim outcome {other:?}"
            ))),
        }
    }

    async fn renew(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(AssertSqlSafe(self.queries.renew.clone()))
            .bind(event_id)
            .bind(event_type)
            .bind(token.as_str())
            .bind(seconds(lease));
        self.owner_checked(query).await
    }

    async fn complete(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(AssertSqlSafe(self.queries.complete.clone()))
            .bind(event_id)
            .bind(event_type)
            .bind(token.as_str())
            .bind(seconds(retention));
        self.owner_checked(query).await
    }

    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        let query = sqlx::query(AssertSqlSafe(self.queries.release.clone()))
            .bind(event_id)
            .bind(token.as_str());
        self.owner_checked(query).await
    }
}
