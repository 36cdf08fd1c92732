//! SQLite: [`SqliteStore`](crate::SqliteStore).

use std::{str::FromStr, time::Duration};

use sqlx::{
    AssertSqlSafe, Executor,
    error::DatabaseError,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use super::{Dialect, Statements, micros, refuse_unusable, sealed::Sealed};
use crate::{Error, SqlStore};

/// The SQLite dialect (feature `sqlite`): [`SqliteStore`](crate::SqliteStore).
#[derive(Debug, Clone, Copy)]
pub struct Sqlite;

impl Sealed for Sqlite {}

/// SQLite's current time in Unix milliseconds (`'now'` is the same for a whole statement).
macro_rules! now {
    () => {
        "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
    };
}

/// The columns and values of a fresh record; `?4` is its span in microseconds.
macro_rules! record {
    ($state:literal) => {
        concat!(
            "INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)\n",
            "VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), '", $state, "', ?3, ",
            now!(), " + ?4 / 1000)\n"
        )
    };
}

/// Claim: insert the claim, or take over a row whose lease (or retention) has expired. A row
/// comes back only when the claim acquired the event; otherwise the store reads the state to
/// tell completed from in flight.
const CLAIM: &str = concat!(
    record!("in_flight"),
    "ON CONFLICT (event_id) DO UPDATE SET
    event_type = excluded.event_type,
    processed_at = excluded.processed_at,
    state = 'in_flight',
    claim_token = excluded.claim_token,
    expires_at = excluded.expires_at
WHERE e.expires_at <= ",
    now!(),
    "
RETURNING 'acquired'"
);

/// Renew in one statement: extend the token's live claim, or record it again when the event has
/// no live record. A live completion by the token is rewritten unchanged (the row comes back:
/// `true`); another owner's live record is left alone (no row: `false`). SQLite evaluates
/// every `SET` expression on the row as it was.
const RENEW: &str = concat!(
    record!("in_flight"),
    "ON CONFLICT (event_id) DO UPDATE SET
    event_type = CASE WHEN e.expires_at <= ",
    now!(),
    " THEN excluded.event_type ELSE e.event_type END,
    processed_at = CASE WHEN e.expires_at <= ",
    now!(),
    " THEN excluded.processed_at ELSE e.processed_at END,
    state = CASE WHEN e.expires_at <= ",
    now!(),
    " THEN 'in_flight' ELSE e.state END,
    claim_token = excluded.claim_token,
    expires_at = CASE WHEN e.state = 'completed' AND e.expires_at > ",
    now!(),
    "
                      THEN e.expires_at ELSE excluded.expires_at END
WHERE e.claim_token = ?3 OR e.expires_at <= ",
    now!(),
    "
RETURNING claim_token"
);

/// Complete in one statement: record the event as completed by the token unless another owner
/// holds or completed it (a live record with another token). A live record of the token keeps
/// its `processed_at` (and so its index entry).
const COMPLETE: &str = concat!(
    record!("completed"),
    "ON CONFLICT (event_id) DO UPDATE SET
    event_type = CASE WHEN e.expires_at <= ",
    now!(),
    " THEN excluded.event_type ELSE e.event_type END,
    processed_at = CASE WHEN e.expires_at <= ",
    now!(),
    " THEN excluded.processed_at ELSE e.processed_at END,
    state = 'completed',
    claim_token = excluded.claim_token,
    expires_at = excluded.expires_at
WHERE e.claim_token = ?3 OR e.expires_at <= ",
    now!(),
    "
RETURNING claim_token"
);

const RELEASE: &str = concat!(
    "DELETE FROM {table}
WHERE event_id = ?1 AND state = 'in_flight' AND claim_token = ?2 AND expires_at > ",
    now!(),
    "
RETURNING claim_token"
);

const STATE: &str = "SELECT state FROM {table} WHERE event_id = ?1";

/// One purge batch of rows past their own expiry (SQLite runs one writer at a time: a short
/// write transaction, which claims wait for through their busy timeout).
const PURGE_EXPIRED: &str = concat!(
    "DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table} WHERE expires_at <= ",
    now!(),
    " LIMIT ?1)"
);

/// One purge batch of rows without an expiry (written by another tool) claimed more than the
/// retention (`?2`, a modifier such as `-259200.000000 seconds`) ago.
const PURGE_UNEXPIRING: &str = "\
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE expires_at IS NULL AND processed_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?2)
    LIMIT ?1)";

/// The columns added to a table of the provider's documented schema, and their definitions
/// (SQLite adds a column only with a constant default).
const ADDED_COLUMNS: [(&str, &str); 4] = [
    ("processed_at", "TIMESTAMP"),
    (
        "state",
        "VARCHAR(9) NOT NULL DEFAULT 'completed' CHECK (state IN ('in_flight', 'completed'))",
    ),
    ("claim_token", "VARCHAR(32)"),
    ("expires_at", "INTEGER"),
];

/// The rows of an adopted table: completed until their `processed_at` (or now) plus `?1`
/// microseconds.
const ADOPT: &str = "\
UPDATE {table}
SET expires_at = CAST(round((julianday(COALESCE(processed_at, 'now')) - 2440587.5) * 86400000.0)
                      AS INTEGER) + ?1 / 1000
WHERE expires_at IS NULL";

impl Dialect for Sqlite {
    type Database = sqlx::Sqlite;
    const MAX_CONNECTIONS: u32 = 8;
    const STATEMENTS: Statements = Statements {
        asynchronous_commit: "NULL",
        // The bound is the connection's busy timeout.
        lock_timeout: "",
        claim_binds: &[0, 1, 2, 3],
        claim: CLAIM,
        renew: RENEW,
        complete: COMPLETE,
        release: RELEASE,
        state: STATE,
    };
    const SCHEMA: &'static str = include_str!("../../migrations/sqlite.sql");
    const READS_STATE_OF_A_DUPLICATE: bool = true;

    fn is_conflict(_error: &dyn DatabaseError) -> bool {
        // SQLite runs one writer at a time: transactions never conflict, they wait (busy
        // timeout).
        false
    }

    async fn migrate(store: &SqlStore<Self>) -> Result<(), Error> {
        // Persistent in the file; a no-op when it is WAL already, "memory" for `:memory:`.
        // It needs a moment without other writers: when that fails the schema is still
        // created, and the connections' busy timeout keeps the rollback journal usable.
        if let Err(error) = store.pool().execute("PRAGMA journal_mode = WAL").await {
            tracing::warn!(%error, "could not switch the SQLite database to WAL mode");
        }
        let table = store.table();
        // One writer at a time: `BEGIN IMMEDIATE` takes the write lock before reading.
        let mut connection = store.pool().acquire().await?;
        connection.execute("BEGIN IMMEDIATE").await?;
        let migrated = async {
            let present: Vec<String> =
                sqlx::query_scalar("SELECT lower(name) FROM pragma_table_info(?1)")
                    .bind(table.as_str())
                    .fetch_all(&mut *connection)
                    .await?;
            refuse_unusable(table, &present)?;
            if !present.is_empty() {
                for (column, definition) in ADDED_COLUMNS {
                    if !present.iter().any(|present| present == column) {
                        connection
                            .execute(AssertSqlSafe(format!(
                                "ALTER TABLE {table} ADD COLUMN {column} {definition}"
                            )))
                            .await?;
                    }
                }
                sqlx::query(AssertSqlSafe(table.sql(ADOPT)))
                    .bind(micros(store.adopted_retention()))
                    .execute(&mut *connection)
                    .await?;
            }
            connection
                .execute(sqlx::raw_sql(AssertSqlSafe(store.schema())))
                .await?;
            Ok::<_, Error>(())
        }
        .await;
        match migrated {
            Ok(()) => {
                connection.execute("COMMIT").await?;
                Ok(())
            }
            Err(error) => {
                connection.execute("ROLLBACK").await?;
                Err(error)
            }
        }
    }

    const CRON_PURGE: &'static str = concat!(
        "DELETE FROM processed_webhook_events WHERE event_id IN (
    SELECT event_id FROM processed_webhook_events
    WHERE expires_at <= ",
        now!(),
        "
    LIMIT 1000);"
    );

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let micros = micros(retention);
        let age = format!("-{}.{:06} seconds", micros / 1_000_000, micros % 1_000_000);
        let batch = i64::try_from(batch).unwrap_or(i64::MAX);
        let mut deleted = 0;
        for sql in [PURGE_EXPIRED, PURGE_UNEXPIRING] {
            deleted += sqlx::query(AssertSqlSafe(store.table().sql(sql)))
                .bind(batch)
                .bind(&age)
                .execute(store.pool())
                .await?
                .rows_affected();
        }
        Ok(deleted)
    }
}

/// [`SqliteStore`](crate::SqliteStore)'s own constructors.
impl SqlStore<Sqlite> {
    /// How long [`connect`](Self::connect)'s connections wait for another writer:
    /// [`LOCK_TIMEOUT`](SqlStore::LOCK_TIMEOUT), 2 s. On SQLite the busy timeout is the
    /// store's bound on lock waits: a claim or a renewal that waits for the write lock for
    /// longer fails (503) instead of landing after the layer gave up on it (see
    /// [Lock waits](SqlStore#lock-waits)); keep it below the layer's store timeout minus the
    /// pool's acquire timeout.
    pub const BUSY_TIMEOUT: Duration = Self::LOCK_TIMEOUT;

    /// Opens the database at `url` (`sqlite://path/to/file.db`, `sqlite:file.db?mode=rwc`;
    /// `sqlite::memory:` for tests) with [`connect_options`](Self::connect_options), over a
    /// pool of at most [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections with an acquire
    /// timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT).
    ///
    /// ```
    /// use sangho_webhook::store::{Claim, ClaimToken, Claimant, IdempotencyStore};
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
    /// let claimant = Claimant::new("evt_1", "charge.succeeded", &token);
    /// let claim = store.claim(claimant, Duration::from_secs(30)).await?;
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
    /// [`BUSY_TIMEOUT`](Self::BUSY_TIMEOUT) and `synchronous = FULL`: every commit (claims,
    /// renewals and completions) is flushed to disk before it answers. To bound lock waits
    /// otherwise, set another `busy_timeout` on the returned options.
    ///
    /// Set [`SqliteSynchronous::Normal`](sqlx::sqlite::SqliteSynchronous) on the returned
    /// options for about twice the write throughput: a commit then still survives a crash of
    /// the application, but a power loss or an operating-system crash can undo the last
    /// commits (the database stays consistent), and a claim lost that way means an event that
    /// can be processed twice.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid.
    pub fn connect_options(url: &str) -> Result<SqliteConnectOptions, Error> {
        Ok(SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Self::BUSY_TIMEOUT))
    }
}
