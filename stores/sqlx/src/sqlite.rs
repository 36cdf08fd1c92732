//! [`SqliteStore`]: the idempotency store over SQLite.

use std::{str::FromStr, sync::Arc, time::Duration};

use async_trait::async_trait;
use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore, StoreError};
use sqlx::{
    AssertSqlSafe, Database, Executor, Sqlite, SqlitePool,
    query::Query,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use crate::{
    Error, TableName,
    claim::Queries,
    error::{milliseconds, store_error},
    purge::Purge,
};

/// The schema, for the default table: `migrations/sqlite.sql`.
pub(crate) const SCHEMA: &str = include_str!("../migrations/sqlite.sql");

/// Claim: insert the claim, or take over a row whose lease (or retention) has expired. A row
/// comes back only when the claim acquired the event; otherwise [`STATE`] tells completed from
/// in flight. SQLite's `'now'` is the same for the whole statement: one clock reading.
const CLAIM: &str = "\
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'in_flight', ?3, {now} + ?4)
ON CONFLICT (event_id) DO UPDATE SET
    event_type = excluded.event_type,
    processed_at = excluded.processed_at,
    state = 'in_flight',
    claim_token = excluded.claim_token,
    expires_at = excluded.expires_at
WHERE e.expires_at <= {now}
RETURNING 1";

/// The state of a record a claim did not take over (read only for a duplicate delivery).
const STATE: &str = "SELECT state FROM {table} WHERE event_id = ?1";

/// Renew in one statement: extend the token's live claim, or record it again when the event has
/// no live record. A live completion by the token is rewritten unchanged (one row changed:
/// `true`); another owner's live record is left alone (no row changed: `false`). SQLite
/// evaluates every `SET` expression on the row as it was.
const RENEW: &str = "\
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'in_flight', ?3, {now} + ?4)
ON CONFLICT (event_id) DO UPDATE SET
    event_type = CASE WHEN e.expires_at <= {now} THEN excluded.event_type ELSE e.event_type END,
    processed_at = CASE WHEN e.expires_at <= {now} THEN excluded.processed_at ELSE e.processed_at END,
    state = CASE WHEN e.expires_at <= {now} THEN 'in_flight' ELSE e.state END,
    claim_token = excluded.claim_token,
    expires_at = CASE WHEN e.state = 'completed' AND e.expires_at > {now}
                      THEN e.expires_at ELSE excluded.expires_at END
WHERE e.claim_token = ?3 OR e.expires_at <= {now}";

/// Complete in one statement: record the event as completed by the token unless another owner
/// holds or completed it (a live record with another token). A live record of the token keeps
/// its `processed_at` (and so its index entry).
const COMPLETE: &str = "\
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'completed', ?3, {now} + ?4)
ON CONFLICT (event_id) DO UPDATE SET
    event_type = CASE WHEN e.expires_at <= {now} THEN excluded.event_type ELSE e.event_type END,
    processed_at = CASE WHEN e.expires_at <= {now} THEN excluded.processed_at ELSE e.processed_at END,
    state = 'completed',
    claim_token = excluded.claim_token,
    expires_at = excluded.expires_at
WHERE e.claim_token = ?3 OR e.expires_at <= {now}";

const RELEASE: &str = "\
DELETE FROM {table}
WHERE event_id = ?1 AND state = 'in_flight' AND claim_token = ?2 AND expires_at > {now}";

/// Every row claimed more than the retention ago, but a live claim; through the
/// `processed_at` index.
const PURGE: &str = "\
DELETE FROM {table}
WHERE processed_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?1)
  AND (state = 'completed' OR expires_at <= {now})";

/// SQLite's current time in Unix milliseconds.
const NOW: &str = "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

/// The statements for `table`.
fn queries(table: &TableName) -> Queries {
    Queries::new(
        table,
        [CLAIM, RENEW, COMPLETE, RELEASE, PURGE],
        &[("{now}", NOW)],
    )
}

/// The idempotency store over SQLite (feature `sqlite`): durable and embedded, for one server
/// (or several processes on one machine sharing the database file).
///
/// The table keeps the seed's columns (`event_id`, `event_type`, `processed_at`: when the event
/// was last claimed, indexed for the purge) and adds `state` (`in_flight` or `completed`),
/// `claim_token` (the owner of a claim) and `expires_at` (the end of the lease, or of the
/// retention once completed; Unix milliseconds); create it with
/// [`migrate`](Self::migrate) or `migrations/sqlite.sql`. **claim** is `INSERT … ON CONFLICT
/// (event_id) DO UPDATE … WHERE <expired> RETURNING …` (the row is taken over only if its
/// expiry has passed; a duplicate reads the row's state to tell completed from in flight),
/// **renew** and **complete** one upsert each (taken only when the row is the token's or no
/// longer live), **release** an owner-checked `DELETE` of a live claim. SQLite runs one writer
/// at a time, so a claim is
/// atomic: among concurrent claims of one event exactly one is acquired. Timestamps come from
/// SQLite's clock (`'now'`, fixed for the duration of a statement), i.e. this machine's.
///
/// Concurrency: the database should be in WAL mode (readers never wait for the writer) and
/// every connection should have a busy timeout (a writer waits for the previous one instead of
/// failing with `database is locked`). [`connect`](Self::connect) sets both;
/// [`migrate`](Self::migrate) switches the file to WAL; a pool you build yourself needs a busy
/// timeout (sqlx's default is 5 seconds).
///
/// ```no_run
/// use std::time::Duration;
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret};
/// use sangho_webhook_sqlx::SqliteStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = SqliteStore::connect("sqlite://sangho-webhooks.db").await?;
/// store.migrate().await?;
/// let purge = store.spawn_purge(Duration::from_secs(72 * 3600), Duration::from_secs(3600));
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_…")?, store);
/// // … serve with the layer; on shutdown:
/// purge.stop().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    table: TableName,
    queries: Arc<Queries>,
    state: Arc<str>,
}

impl SqliteStore {
    /// How long [`connect`](Self::connect)'s pool waits for a connection before an operation
    /// fails (with [`StoreError::Timeout`]): shorter than the layer's default store timeout.
    pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

    /// How long [`connect`](Self::connect)'s connections wait for another writer.
    pub const BUSY_TIMEOUT: Duration = Duration::from_secs(3);

    /// How many connections [`connect`](Self::connect)'s pool opens at most.
    pub const MAX_CONNECTIONS: u32 = 8;

    /// A store over `pool`, on the default table `processed_webhook_events`.
    ///
    /// Build the pool with this crate's re-exported [`sqlx`](crate::sqlx); WAL mode and a busy
    /// timeout are recommended (see the type's docs):
    ///
    /// ```
    /// use std::time::Duration;
    /// use sangho_webhook_sqlx::{
    ///     SqliteStore,
    ///     sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
    /// };
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("webhooks.db");
    /// let options = SqliteConnectOptions::new()
    ///     .filename(path)
    ///     .create_if_missing(true)
    ///     .journal_mode(SqliteJournalMode::Wal)
    ///     .busy_timeout(Duration::from_secs(3));
    /// let pool = SqlitePoolOptions::new()
    ///     .acquire_timeout(Duration::from_secs(3))
    ///     .connect_with(options)
    ///     .await?;
    /// let store = SqliteStore::new(pool).with_table_name("shop_webhook_events")?;
    /// store.migrate().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(pool: SqlitePool) -> Self {
        let table = TableName::default();
        Self {
            queries: Arc::new(queries(&table)),
            state: table.sql(STATE),
            pool,
            table,
        }
    }

    /// Opens the database at `url` (`sqlite://path/to/file.db`, `sqlite:file.db?mode=rwc`;
    /// `sqlite::memory:` for tests) with [`connect_options`](Self::connect_options), over a
    /// pool of at most [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections with an acquire
    /// timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT).
    ///
    /// ```
    /// use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore};
    /// use sangho_webhook_sqlx::SqliteStore;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let url = format!("sqlite://{}", dir.path().join("webhooks.db").display());
    /// let store = SqliteStore::connect(&url).await?;
    /// store.migrate().await?;
    /// let token = ClaimToken::generate();
    /// let claim = store.claim("evt_1", "charge.succeeded", &token, Duration::from_secs(30)).await?;
    /// assert_eq!(claim, Claim::Acquired);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid or the file cannot be opened.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let pool = SqlitePoolOptions::new()
            .max_connections(Self::MAX_CONNECTIONS)
            .acquire_timeout(Self::ACQUIRE_TIMEOUT)
            .connect_with(Self::connect_options(url)?)
            .await?;
        Ok(Self::new(pool))
    }

    /// The connection options [`connect`](Self::connect) uses, for a pool of your own: the
    /// database at `url`, created if missing, in WAL mode, with a busy timeout of
    /// [`BUSY_TIMEOUT`](Self::BUSY_TIMEOUT) and `synchronous = NORMAL`.
    ///
    /// `NORMAL` is SQLite's recommended setting in WAL mode: a commit survives a crash of the
    /// application, and only a power loss or an operating-system crash can undo the last
    /// commits (the database stays consistent). Here that means at worst an event processed
    /// again on redelivery. Set [`SqliteSynchronous::Full`](sqlx::sqlite::SqliteSynchronous)
    /// on the returned options to flush every commit to disk instead (about half the
    /// throughput).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid.
    pub fn connect_options(url: &str) -> Result<SqliteConnectOptions, Error> {
        Ok(SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Self::BUSY_TIMEOUT))
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
            queries: Arc::new(queries(&table)),
            state: table.sql(STATE),
            table,
            pool: self.pool,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The schema script for this store's table: `migrations/sqlite.sql` with the table and
    /// index names substituted. Run it with your own migration tool if you prefer.
    pub fn schema(&self) -> String {
        self.table.schema(SCHEMA)
    }

    /// Switches the database file to WAL mode (when it is a file), then creates the table and
    /// its index if they are missing. Safe to call on every start.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database refuses (e.g. a read-only file).
    pub async fn migrate(&self) -> Result<(), Error> {
        // Persistent in the file; a no-op when it is WAL already, "memory" for `:memory:`.
        // It needs a moment without other writers: when that fails the schema is still
        // created, and the connections' busy timeout keeps the rollback journal usable.
        if let Err(error) = self.pool.execute("PRAGMA journal_mode = WAL").await {
            tracing::warn!(%error, "could not switch the SQLite database to WAL mode");
        }
        self.pool
            .execute(sqlx::raw_sql(AssertSqlSafe(self.schema())))
            .await?;
        Ok(())
    }

    /// Deletes the rows claimed more than `retention` ago (their `processed_at`), except a
    /// claim whose lease still runs: the completed events past the retention, and the
    /// abandoned claims (their owner is gone) once they are that old. Answers how many rows it
    /// deleted. It scans the `processed_at` index, and runs as one statement.
    ///
    /// An abandoned claim younger than the retention stays until then: it is harmless, the
    /// next delivery of its event takes it over. Pass at least the provider's redelivery
    /// window (48 hours) as the retention; the layer's default is 72 hours.
    ///
    /// The same, as plain SQL for cron (`sqlite3 FILE "…"`), for the default table:
    ///
    /// ```sql
    /// DELETE FROM processed_webhook_events
    /// WHERE processed_at < strftime('%Y-%m-%d %H:%M:%f', 'now', '-72 hours')
    ///   AND (state = 'completed'
    ///        OR expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER));
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the statement fails.
    pub async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        let millis = milliseconds(retention);
        let age = format!("-{}.{:03} seconds", millis / 1000, millis % 1000);
        let result = sqlx::query(AssertSqlSafe(self.queries.purge.clone()))
            .bind(age)
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
        query: Query<'_, Sqlite, <Sqlite as Database>::Arguments>,
    ) -> Result<bool, StoreError> {
        let result = query
            .execute(&self.pool)
            .await
            .map_err(|error| self.error(error))?;
        Ok(result.rows_affected() == 1)
    }
}

impl Purge for SqliteStore {
    async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        SqliteStore::purge(self, retention).await
    }
}

#[async_trait]
impl IdempotencyStore for SqliteStore {
    async fn claim(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let acquired: Option<(i64,)> = sqlx::query_as(AssertSqlSafe(self.queries.claim.clone()))
            .bind(event_id)
            .bind(event_type)
            .bind(token.as_str())
            .bind(milliseconds(lease))
            .fetch_optional(&self.pool)
            .await
            .map_err(|error| self.error(error))?;
        if acquired.is_some() {
            return Ok(Claim::Acquired);
        }
        // A live record: completed, or another claim in flight. Gone since (released, purged):
        // it was in flight when the claim ran.
        let state: Option<(String,)> = sqlx::query_as(AssertSqlSafe(self.state.clone()))
            .bind(event_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|error| self.error(error))?;
        match state.as_ref().map(|(state,)| state.as_str()) {
            Some("completed") => Ok(Claim::Completed),
            Some("in_flight") | None => Ok(Claim::InFlight),
            Some(other) => Err(StoreError::Protocol(format!(
                "unexpected state {other:?} in the table"
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
            .bind(milliseconds(lease));
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
            .bind(milliseconds(retention));
        self.owner_checked(query).await
    }

    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        let query = sqlx::query(AssertSqlSafe(self.queries.release.clone()))
            .bind(event_id)
            .bind(token.as_str());
        self.owner_checked(query).await
    }
}
