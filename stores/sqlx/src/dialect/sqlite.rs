//! SQLite: [`SqliteStore`](crate::SqliteStore).

use std::{str::FromStr, time::Duration};

use sqlx::{
    AssertSqlSafe, Executor,
    error::DatabaseError,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use super::{
    Bind, Dialect, InboxTemplates, Sealed, micros, refuse_unusable,
    sealed::{ManyTemplates, Templates},
};
use crate::{Error, GroupCommit, SqlStore, group_commit::Write, queries::statement};

/// The SQLite dialect (feature `sqlite`): [`SqliteStore`](crate::SqliteStore).
#[derive(Debug, Clone, Copy)]
pub struct Sqlite;

/// Switches the database file to WAL mode.
const WAL: &str = include_str!("../../queries/sqlite/wal.sql");

/// Begins a transaction with the write lock: the migration's, a group commit's.
const BEGIN_WRITE: &str = include_str!("../../queries/sqlite/begin_write.sql");

/// The table's columns, in lower case (none: no table).
const COLUMNS: &str = include_str!("../../queries/sqlite/columns.sql");

/// The statement the table was created with, and whether it is `WITHOUT ROWID` (none: no
/// table).
const TABLE_SQL: &str = include_str!("../../queries/sqlite/table_sql.sql");

/// The table's indexes and triggers, to create again after a rebuild.
const TABLE_SCHEMA: &str = include_str!("../../queries/sqlite/table_schema.sql");

/// The connection's `synchronous` setting.
const SYNCHRONOUS: &str = include_str!("../../queries/sqlite/synchronous.sql");

/// What the stored statement of a table whose state check allows inbox mode's states holds.
const INBOX_STATES: &str = "'received'";

/// `synchronous = FULL`, SQLite's value for it.
const SYNCHRONOUS_FULL: i64 = 2;

impl Dialect for Sqlite {
    type Database = sqlx::Sqlite;
}

impl Sealed for Sqlite {
    const MAX_CONNECTIONS: u32 = 8;
    const GROUP_COMMIT: GroupCommit = GroupCommit::SQLITE;
    // Each statement is a round trip to the connection's own thread.
    const GROUP_WRITER_THREAD: bool = true;
    // The group's transaction takes the write lock before its first statement reads.
    const GROUP_BEGIN: Option<&'static str> = Some(BEGIN_WRITE);
    // A statement that writes takes the write lock as it starts (as `BEGIN IMMEDIATE` does),
    // and, outside a transaction, commits before it reports its last row: a group of one
    // statement (receipts only, completions only, takes only) saves two round trips to the
    // connection's thread.
    const GROUP_OF_ONE_STATEMENT_COMMITS_ITSELF: bool = true;
    // A query may hold several statements, run one after the other on the connection's
    // thread: a group of several statements of many rows (a drain's takes and completions)
    // saves the round trips of its `BEGIN` and `COMMIT`.
    const GROUP_BEGIN_AND_COMMIT_RIDE_ALONG: bool = true;
    const MANY: Option<ManyTemplates> = Some(ManyTemplates {
        claim: include_str!("../../queries/sqlite/claim_many.sql"),
        claim_by_owner: false,
        state: Some(include_str!("../../queries/sqlite/state_many.sql")),
        complete: include_str!("../../queries/sqlite/complete_many.sql"),
        receive: Some(include_str!("../../queries/sqlite/inbox_receive_many.sql")),
        receive_numbers: None,
        inbox_complete: Some(include_str!("../../queries/sqlite/inbox_complete_many.sql")),
        inbox_take: Some(include_str!("../../queries/sqlite/inbox_take_many.sql")),
    });
    const SQL: Templates = Templates {
        claim: include_str!("../../queries/sqlite/claim.sql"),
        claim_binds: &[0, 1, 2, 3],
        state: Some(include_str!("../../queries/sqlite/state.sql")),
        renew: include_str!("../../queries/sqlite/renew.sql"),
        complete: include_str!("../../queries/sqlite/complete.sql"),
        release: include_str!("../../queries/sqlite/release.sql"),
        purge: &[
            include_str!("../../queries/sqlite/purge_expired.sql"),
            include_str!("../../queries/sqlite/purge_unexpiring.sql"),
        ],
        adopt: &[
            include_str!("../../queries/sqlite/add_columns.sql"),
            include_str!("../../queries/sqlite/adopt.sql"),
            include_str!("../../queries/sqlite/rebuild.sql"),
        ],
        cron_purge: include_str!("../../queries/sqlite/cron_purge.sql"),
        schema: include_str!("../../migrations/sqlite.sql"),
        inbox: Some(InboxTemplates {
            receive: (
                include_str!("../../queries/sqlite/inbox_receive.sql"),
                &[0, 1, 2, 3, 4, 5],
            ),
            receive_taken: None,
            take: (
                include_str!("../../queries/sqlite/inbox_take.sql"),
                &[0, 1, 2],
            ),
            renew: (
                include_str!("../../queries/sqlite/inbox_renew.sql"),
                &[0, 1, 2],
            ),
            complete: (
                include_str!("../../queries/sqlite/inbox_complete.sql"),
                &[0, 1, 2],
            ),
            fail: (
                include_str!("../../queries/sqlite/inbox_fail.sql"),
                &[0, 1, 2, 3, 4],
            ),
            abandon: (
                include_str!("../../queries/sqlite/inbox_abandon.sql"),
                &[0, 1],
            ),
            state: (include_str!("../../queries/sqlite/inbox_state.sql"), &[0]),
            stats: (include_str!("../../queries/sqlite/inbox_stats.sql"), &[]),
            gauges: (include_str!("../../queries/sqlite/inbox_gauges.sql"), &[]),
            stats_by_type: (
                include_str!("../../queries/sqlite/inbox_stats_by_type.sql"),
                &[],
            ),
            list: (
                include_str!("../../queries/sqlite/inbox_list.sql"),
                &[0, 1, 2, 3, 4, 5],
            ),
            count: (
                include_str!("../../queries/sqlite/inbox_count.sql"),
                &[0, 1, 2, 3, 5],
            ),
            show: (include_str!("../../queries/sqlite/inbox_show.sql"), &[0]),
            replay: (
                include_str!("../../queries/sqlite/inbox_replay.sql"),
                &[0, 1, 2],
            ),
            discard: (include_str!("../../queries/sqlite/inbox_discard.sql"), &[0]),
        }),
    };

    fn is_conflict(_error: &dyn DatabaseError) -> bool {
        // SQLite runs one writer at a time: transactions never conflict, they wait (busy
        // timeout).
        false
    }

    async fn migrate(store: &SqlStore<Self>) -> Result<(), Error> {
        // Persistent in the file; a no-op when it is WAL already, "memory" for `:memory:`.
        // It needs a moment without other writers: when that fails the schema is still
        // created, and the connections' busy timeout keeps the rollback journal usable.
        if let Err(error) = store.pool().execute(AssertSqlSafe(statement(WAL))).await {
            tracing::warn!(%error, "could not switch the SQLite database to WAL mode");
        }
        warn_unless_synchronous_full(store).await;
        let table = store.table();
        // One writer at a time: `BEGIN IMMEDIATE` takes the write lock before reading.
        let mut transaction = store
            .pool()
            .begin_with(AssertSqlSafe(statement(BEGIN_WRITE)))
            .await?;
        let migrated = async {
            let present: Vec<String> = sqlx::query_scalar(AssertSqlSafe(statement(COLUMNS)))
                .bind(table.as_str())
                .fetch_all(&mut *transaction)
                .await?;
            refuse_unusable(table, &present)?;
            if !present.is_empty() {
                let [add_columns, adopt, rebuild] = &store.queries().adopt[..] else {
                    unreachable!("three adoption files")
                };
                for add_column in add_columns {
                    if !present
                        .iter()
                        .any(|present| present == added_column(add_column))
                    {
                        transaction
                            .execute(AssertSqlSafe(add_column.clone()))
                            .await?;
                    }
                }
                // A state check without inbox mode's states (the previous release's, or the
                // one it added to a table it adopted), or rows kept by event id (`WITHOUT
                // ROWID`, as earlier releases created the table): SQLite cannot alter a check
                // or a table's layout, so the table is rebuilt, under the write lock this
                // transaction holds.
                let (created, without_rowid): (String, bool) =
                    sqlx::query_as(AssertSqlSafe(statement(TABLE_SQL)))
                        .bind(table.as_str())
                        .fetch_one(&mut *transaction)
                        .await?;
                if !created.contains(INBOX_STATES) || without_rowid {
                    let saved: Vec<String> =
                        sqlx::query_scalar(AssertSqlSafe(statement(TABLE_SCHEMA)))
                            .bind(table.as_str())
                            .fetch_all(&mut *transaction)
                            .await?;
                    tracing::info!(
                        table = table.as_str(),
                        without_rowid,
                        "rebuilding the SQLite table (inbox mode's states, rows in the order written)"
                    );
                    for step in rebuild {
                        transaction.execute(AssertSqlSafe(step.clone())).await?;
                    }
                    for index_or_trigger in saved {
                        transaction
                            .execute(sqlx::raw_sql(AssertSqlSafe(index_or_trigger)))
                            .await?;
                    }
                }
                for adopt in adopt {
                    sqlx::query(AssertSqlSafe(adopt.clone()))
                        .bind(micros(store.adopted_retention()))
                        .execute(&mut *transaction)
                        .await?;
                }
            }
            transaction
                .execute(sqlx::raw_sql(AssertSqlSafe(store.schema())))
                .await?;
            Ok::<_, Error>(())
        }
        .await;
        match migrated {
            Ok(()) => {
                transaction.commit().await?;
                Ok(())
            }
            Err(error) => {
                transaction.rollback().await?;
                Err(error)
            }
        }
    }

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let micros = micros(retention);
        let age = format!("-{}.{:06} seconds", micros / 1_000_000, micros % 1_000_000);
        let batch = i64::try_from(batch).unwrap_or(i64::MAX);
        let mut deleted = 0;
        // Through the store's writer, which holds SQLite's one write lock most of the time
        // under load: in its queue, a purge batch takes its turn instead of waiting for a gap.
        for sql in store.queries().purge.iter().flatten() {
            deleted += store
                .write(Write::execute(sql, &[Bind::Int(batch), Bind::Text(&age)]))
                .await?
                .into_changed();
        }
        Ok(deleted)
    }
}

/// Logs an error when the pool's connections commit below `synchronous = FULL`: inbox mode's
/// receipts are acknowledged once committed, and a power loss can then undo the last ones.
async fn warn_unless_synchronous_full(store: &SqlStore<Sqlite>) {
    match sqlx::query_scalar::<_, i64>(AssertSqlSafe(statement(SYNCHRONOUS)))
        .fetch_one(store.pool())
        .await
    {
        Ok(level) if level < SYNCHRONOUS_FULL => tracing::error!(
            synchronous = level,
            "the SQLite connections commit with synchronous below FULL: a power loss or an \
             operating-system crash can lose inbox receipts already acknowledged with 202; \
             use SqliteStore::connect_options (synchronous = FULL)"
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "could not read the SQLite synchronous setting"),
    }
}

/// The column that `add_column`, one statement of `add_columns.sql`, adds: the word after
/// `ADD COLUMN`.
fn added_column(add_column: &str) -> &str {
    add_column
        .split_once("ADD COLUMN ")
        .and_then(|(_, column)| column.split_whitespace().next())
        .unwrap_or_default()
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
    /// Inbox mode's receipts need `FULL`: a receipt is acknowledged (202) once its commit
    /// returns, and below `FULL` a power loss can undo receipts the provider was already told
    /// arrived, events that are then lost. [`migrate`](SqlStore::migrate) logs an error when
    /// the pool's connections commit below `FULL`.
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

#[cfg(test)]
mod tests {
    use crate::dialect::{INBOX_COLUMNS, STORE_COLUMNS, Sealed};

    #[test]
    fn the_migration_adds_every_store_column() {
        let queries = crate::queries::Queries::new::<super::Sqlite>(
            &crate::TableName::default(),
            true,
            std::time::Duration::from_secs(2),
        );
        let added: Vec<&str> = queries.adopt[0]
            .iter()
            .map(|add_column| super::added_column(add_column))
            .collect();
        let expected: Vec<&str> = STORE_COLUMNS
            .iter()
            .chain(&INBOX_COLUMNS)
            .copied()
            .collect();
        assert_eq!(added, expected);
        assert_eq!(<super::Sqlite as Sealed>::SQL.adopt.len(), 3);
    }

    /// The columns of the first `CREATE TABLE` in `script`, one definition a line.
    fn table_definition(script: &str) -> Vec<&str> {
        let (_, created) = script.split_once("CREATE TABLE ").expect("a CREATE TABLE");
        let (_, columns) = created.split_once("(\n").expect("its columns");
        let (columns, _) = columns.split_once("\n);").expect("their end");
        columns.lines().map(str::trim).collect()
    }

    #[test]
    fn the_rebuild_creates_the_table_of_the_migration_script() {
        let [_, _, rebuild] = <super::Sqlite as Sealed>::SQL.adopt else {
            unreachable!("three adoption files")
        };
        assert_eq!(
            table_definition(rebuild),
            table_definition(<super::Sqlite as Sealed>::SQL.schema)
        );
    }
}
