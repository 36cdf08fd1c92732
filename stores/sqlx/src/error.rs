use std::time::Duration;

use sangho_webhook::store::StoreError;

/// An error from setting up or maintaining a store: an invalid table name, or the database
/// failing to connect, migrate or purge.
///
/// The store operations the layer calls (claim, complete, release) answer
/// [`StoreError`] instead, as the [`IdempotencyStore`](sangho_webhook::store::IdempotencyStore)
/// trait requires.
///
/// ```
/// use sangho_webhook_sqlx::{Error, TableName};
///
/// let error = TableName::new("events; DROP TABLE users").unwrap_err();
/// assert!(matches!(error, Error::InvalidTableName { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The table name is not a plain SQL identifier (see [`TableName`](crate::TableName)).
    #[error(
        "invalid table name {name:?}: expected 1 to 46 ASCII letters, digits or underscores, not starting with a digit"
    )]
    InvalidTableName {
        /// The rejected name.
        name: String,
    },
    /// [`migrate`](crate::SqlStore::migrate) found a table of that name without columns it
    /// cannot add: it is not an idempotency table (the provider's documented schema has
    /// `event_id` and `event_type`), and the store leaves it alone.
    #[error(
        "table {table} cannot be used to record webhook events: it has no column {}",
        missing.join(", no column ")
    )]
    IncompatibleTable {
        /// The table.
        table: String,
        /// The columns it lacks.
        missing: Vec<String>,
    },
    /// [`migrate`](crate::SqlStore::migrate) waited for another migration (another replica
    /// starting) for longer than it allows; nothing was changed. Try again.
    #[error("another migration of table {table} held the migration lock for {waited:?}")]
    MigrationLocked {
        /// The table.
        table: String,
        /// How long it waited.
        waited: Duration,
    },
    /// [`migrate`](crate::SqlStore::migrate) found the table held by another transaction (a
    /// handler's transaction, a long report) every time it tried to change it, for longer than
    /// it allows; nothing was changed. Each try waits for the table only briefly, so that the
    /// traffic queued behind it is never blocked for long (see
    /// [`migrate`](crate::SqlStore::migrate)). Try again.
    #[error(
        "table {table} stayed busy for {waited:?}: another transaction held it every time the \
         upgrade tried to change it"
    )]
    TableBusy {
        /// The table.
        table: String,
        /// How long it tried.
        waited: Duration,
    },
    /// [`migrate`](crate::SqlStore::migrate) found a MariaDB server older than 10.6, the first
    /// with `SELECT … FOR UPDATE SKIP LOCKED` (inbox mode's take), or a server that is not
    /// MariaDB; nothing was changed. Upgrade the server.
    #[error("MariaDB 10.6 or later is required; the server is version {version}")]
    UnsupportedServer {
        /// The server's version, as it reports it (`SELECT VERSION()`).
        version: String,
    },
    /// The database reported an error (kept as the source).
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// The commit of a group of writes that held this one failed (see
    /// [`GroupCommit`](crate::GroupCommit)).
    #[error(transparent)]
    GroupCommit(#[from] crate::GroupCommitFailed),
}

/// Turns a database error from a store operation into the layer's [`StoreError`]: a pool that
/// could not hand out a connection in time becomes [`StoreError::Timeout`], anything else
/// [`StoreError::Backend`] with the `sqlx` error as its source.
pub(crate) fn store_error(error: sqlx::Error, acquire_timeout: Duration) -> StoreError {
    match error {
        sqlx::Error::PoolTimedOut => StoreError::Timeout(acquire_timeout),
        other => StoreError::backend(other),
    }
}

/// The longest lease, retention or purge age the stores write: longer ones are shortened to
/// this (about 1000 years), so that timestamp arithmetic never overflows.
pub(crate) const MAX_SPAN: Duration = Duration::from_secs(1000 * 365 * 24 * 3600);

impl From<crate::group_commit::WriteError> for Error {
    fn from(error: crate::group_commit::WriteError) -> Self {
        match error {
            crate::group_commit::WriteError::Database(error) => Self::Database(error),
            crate::group_commit::WriteError::Group(error) => Self::GroupCommit(error),
        }
    }
}
