//! MariaDB: [`MariaDbStore`](crate::MariaDbStore).

use std::time::Duration;

use sqlx::{
    AssertSqlSafe, Executor,
    error::DatabaseError,
    mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions},
};

use super::{Dialect, Statements, has_store_columns, micros, refuse_unusable, sealed::Sealed};
use crate::{Error, SqlStore};

/// The MariaDB dialect (feature `mariadb`, MariaDB 10.5 or later):
/// [`MariaDbStore`](crate::MariaDbStore). MySQL is not supported: the statements need
/// `INSERT … RETURNING` and `DELETE … RETURNING`, which only MariaDB has.
#[derive(Debug, Clone, Copy)]
pub struct MariaDb;

impl Sealed for MariaDb {}

/// Claim in one statement. On a duplicate key the row is taken over if its expiry has passed
/// and left as it is otherwise. `RETURNING` reports the row as it now is: `completed`, the
/// owner's token when this statement may have written the claim (its `expires_at` is this
/// statement's time plus the lease: the store compares the token), `in_flight` otherwise. `expires_at` is assigned last: MariaDB evaluates the
/// assignments in order, so every condition still sees the old expiry. `UTC_TIMESTAMP(6)` is
/// the statement's start: one clock reading.
const CLAIM: &str = "\
{lock_timeout}INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), 'in_flight', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at), processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'in_flight', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)
RETURNING CASE WHEN state = 'completed' THEN 'completed'
               WHEN expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND THEN claim_token
               ELSE 'in_flight' END";

/// Renew in one statement: extend the token's live claim, or record it again when the event has
/// no live record; another owner's live record (and the token's own live completion) is left
/// as it is. `RETURNING` reports the owner as it now is. `state` and `claim_token` change only
/// when the row had expired, so the last condition still reads the old owner and state, and
/// `expires_at`, assigned last, is the old expiry in every condition.
const RENEW: &str = "\
{lock_timeout}INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), 'in_flight', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at), processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'in_flight', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6)
                    OR (claim_token = VALUES(claim_token) AND state = 'in_flight'),
                    VALUES(expires_at), expires_at)
RETURNING claim_token";

/// Complete in one statement: record the event as completed by the token unless another owner
/// holds or completed it (a live record with another token). `RETURNING` reports the owner as
/// it now is. Evaluated in order, as in [`RENEW`].
const COMPLETE: &str = "\
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), 'completed', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at), processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6) OR claim_token = VALUES(claim_token),
               'completed', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6) OR claim_token = VALUES(claim_token),
                    VALUES(expires_at), expires_at)
RETURNING claim_token";

const RELEASE: &str = "\
DELETE FROM {table}
WHERE event_id = ? AND state = 'in_flight' AND claim_token = ? AND expires_at > UTC_TIMESTAMP(6)
RETURNING claim_token";

const STATE: &str = "SELECT state FROM {table} WHERE event_id = ?";

/// One purge batch of rows past their own expiry, under a statement timeout (seconds) and
/// short lock waits; InnoDB deletes through the `expires_at` index.
const PURGE_EXPIRED: &str = "\
SET STATEMENT max_statement_time = 10, innodb_lock_wait_timeout = 1, lock_wait_timeout = 1 FOR
DELETE FROM {table} WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT ?";

/// One purge batch of rows without an expiry (written by another tool) claimed more than the
/// retention ago.
const PURGE_UNEXPIRING: &str = "\
SET STATEMENT max_statement_time = 10, innodb_lock_wait_timeout = 1, lock_wait_timeout = 1 FOR
DELETE FROM {table}
WHERE expires_at IS NULL AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT ?";

/// The time zone of the store's own connections: a `TIMESTAMP` column (the `processed_at` of
/// an adopted table) then reads and writes UTC, like the store's own `DATETIME` columns.
const UTC: &str = "SET time_zone = '+00:00'";

/// The isolation level of the store's own connections.
const READ_COMMITTED: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// Serialises concurrent `migrate()` calls (several replicas starting at once); answers 1 once
/// held, 0 after the timeout, NULL on an error.
const MIGRATION_LOCK: &str = "SELECT GET_LOCK(CONCAT('sangho_migrate_', ?), ?)";

/// How long a migration waits for another replica's migration.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The table's columns (none: no table).
const COLUMNS: &str = "\
SELECT lower(column_name) FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ?";

/// How many of the two indexes exist.
const INDEXES: &str = "\
SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = ? AND index_name IN (?, ?)";

/// The table's columns, in lower case.
async fn columns(
    connection: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    table: &crate::TableName,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(COLUMNS)
        .bind(table.as_str())
        .fetch_all(&mut **connection)
        .await?;
    Ok(rows.into_iter().map(|(column,)| column).collect())
}
const MIGRATION_UNLOCK: &str = "SELECT RELEASE_LOCK(CONCAT('sangho_migrate_', ?))";

impl Dialect for MariaDb {
    type Database = sqlx::MySql;
    const MAX_CONNECTIONS: u32 = 16;
    const STATEMENTS: Statements = Statements {
        asynchronous_commit: "NULL",
        // Row locks (InnoDB) and table locks (a migration's `ALTER TABLE`, `LOCK TABLES`).
        lock_timeout: "SET STATEMENT innodb_lock_wait_timeout = {seconds}, \
                       lock_wait_timeout = {seconds} FOR\n",
        claim_binds: &[0, 1, 2, 3, 3],
        claim: CLAIM,
        renew: RENEW,
        complete: COMPLETE,
        release: RELEASE,
        state: STATE,
    };
    const SCHEMA: &'static str = include_str!("../../migrations/mariadb.sql");
    const READS_STATE_OF_A_DUPLICATE: bool = false;

    fn is_conflict(error: &dyn DatabaseError) -> bool {
        // ER_LOCK_DEADLOCK. Not ER_LOCK_WAIT_TIMEOUT (1205): the claim's lock timeout ran out.
        error
            .try_downcast_ref::<MySqlDatabaseError>()
            .is_some_and(|error| error.number() == 1213)
    }

    async fn migrate(store: &SqlStore<Self>) -> Result<(), Error> {
        let table = store.table();
        let mut connection = store.pool().acquire().await?;
        let present = columns(&mut connection, table).await?;
        refuse_unusable(table, &present)?;
        let (indexes,): (i64,) = sqlx::query_as(INDEXES)
            .bind(table.as_str())
            .bind(table.index_name())
            .bind(table.expiry_index_name())
            .fetch_one(&mut *connection)
            .await?;
        if has_store_columns(&present) && indexes == 2 {
            return Ok(());
        }
        let (locked,): (Option<i64>,) = sqlx::query_as(MIGRATION_LOCK)
            .bind(table.as_str())
            .bind(MIGRATION_LOCK_TIMEOUT.as_secs() as i64)
            .fetch_one(&mut *connection)
            .await?;
        if locked != Some(1) {
            return Err(Error::MigrationLocked {
                table: table.as_str().to_owned(),
                waited: MIGRATION_LOCK_TIMEOUT,
            });
        }
        let migrated = async {
            // Another replica may have migrated meanwhile: look again, under the lock.
            refuse_unusable(table, &columns(&mut connection, table).await?)?;
            // A TIMESTAMP `processed_at` of an adopted table reads as UTC.
            connection
                .execute("SET @sangho_time_zone = @@session.time_zone, time_zone = '+00:00'")
                .await?;
            let script = store.schema().replace(
                "INTERVAL 72 HOUR",
                &format!("INTERVAL {} MICROSECOND", micros(store.adopted_retention())),
            );
            let mut result = Ok(());
            for statement in statements(&script) {
                if let Err(error) = connection.execute(AssertSqlSafe(statement)).await {
                    result = Err(error.into());
                    break;
                }
            }
            connection
                .execute("SET time_zone = @sangho_time_zone")
                .await?;
            result
        }
        .await;
        sqlx::query(MIGRATION_UNLOCK)
            .bind(table.as_str())
            .execute(&mut *connection)
            .await?;
        migrated
    }

    const CRON_PURGE: &'static str = "\
DELETE FROM processed_webhook_events WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT 1000;";

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let mut connection = store.pool().acquire().await?;
        // For the next transaction only: each statement below is one.
        connection
            .execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await?;
        let expired = sqlx::query(AssertSqlSafe(store.table().sql(PURGE_EXPIRED)))
            .bind(batch)
            .execute(&mut *connection)
            .await?
            .rows_affected();
        connection
            .execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await?;
        let unexpiring = sqlx::query(AssertSqlSafe(store.table().sql(PURGE_UNEXPIRING)))
            .bind(micros(retention))
            .bind(batch)
            .execute(&mut *connection)
            .await?
            .rows_affected();
        Ok(expired + unexpiring)
    }
}

/// The statements of a migration script: split at the `;` that end a line, comments dropped.
fn statements(script: &str) -> Vec<String> {
    let code: String = script
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .map(|line| format!("{line}\n"))
        .collect();
    code.split(";\n")
        .map(str::trim)
        .filter(|statement| !statement.is_empty())
        .map(str::to_owned)
        .collect()
}

/// [`MariaDbStore`](crate::MariaDbStore)'s own constructor.
impl SqlStore<MariaDb> {
    /// Connects to `url` (`mysql://user:password@host:port/database`, or `mariadb://…`) with a
    /// pool of at most [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections and an acquire
    /// (and connect) timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT), and opens one
    /// connection to check the URL. Each connection runs at READ COMMITTED (InnoDB's default
    /// is REPEATABLE READ, whose gap locks make concurrent claims deadlock more often), in the
    /// time zone UTC.
    ///
    /// On a pool of your own ([`new`](SqlStore::new)) the store leaves the session alone; a
    /// claim that InnoDB aborts on a deadlock (error 1213) lost a race for the event and is
    /// answered as in flight (409), never as a store failure. A claim whose lock wait ran out
    /// ([`with_lock_timeout`](Self::with_lock_timeout), error 1205) is a store failure (503).
    ///
    /// Durability is the server's: with InnoDB's default `innodb_flush_log_at_trx_commit = 1`
    /// every claim, renewal and completion is flushed to disk before it answers.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid or the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options: MySqlConnectOptions = url.parse()?;
        let pool = MySqlPoolOptions::new()
            .max_connections(Self::MAX_CONNECTIONS)
            .acquire_timeout(Self::ACQUIRE_TIMEOUT)
            .after_connect(|connection, _| {
                Box::pin(async move {
                    connection.execute(READ_COMMITTED).await?;
                    connection.execute(UTC).await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        Ok(Self::new(pool))
    }

    /// How long a claim or a renewal waits for a lock held by another transaction (the event's
    /// row, or the table during a migration's `ALTER TABLE`) before it fails with error 1205;
    /// the default is [`LOCK_TIMEOUT`](SqlStore::LOCK_TIMEOUT), 2 s. MariaDB counts these
    /// waits in whole seconds: rounded up, at least 1 s.
    ///
    /// The claim and renew statements run as `SET STATEMENT innodb_lock_wait_timeout = …,
    /// lock_wait_timeout = … FOR …`: still one round trip, on a pool of your own as on
    /// [`connect`](Self::connect)'s, and the session's own settings (InnoDB's default is 50 s)
    /// stay as they are for every other statement, your transactions included.
    ///
    /// Keep it below the layer's store timeout minus the pool's acquire timeout (5 s − 3 s
    /// with the defaults): a claim the layer gave up on while it waited for a lock would
    /// otherwise land after the layer released it, and block the event with 409 for a lease
    /// (see [Lock waits](SqlStore#lock-waits)).
    #[must_use]
    pub fn with_lock_timeout(self, timeout: Duration) -> Self {
        self.set_lock_timeout(timeout)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_script_splits_into_its_statements() {
        let statements = super::statements(<super::MariaDb as super::Dialect>::SCHEMA);
        assert_eq!(statements.len(), 5);
        assert!(statements[0].starts_with("CREATE TABLE IF NOT EXISTS"));
        assert!(statements[1].starts_with("ALTER TABLE"));
        assert!(statements[2].starts_with("UPDATE"));
        assert!(statements[3].starts_with("CREATE INDEX IF NOT EXISTS"));
        assert!(statements[4].starts_with("CREATE INDEX IF NOT EXISTS"));
    }
}
