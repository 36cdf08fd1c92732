//! MariaDB: [`MariaDbStore`](crate::MariaDbStore).

use std::{sync::Arc, time::Duration};

use sqlx::{
    AssertSqlSafe, Executor,
    error::DatabaseError,
    mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions},
};

use super::{Dialect, Sealed, has_store_columns, micros, refuse_unusable, sealed::Templates};
use crate::{
    Error, SqlStore,
    queries::{statement, statements},
};

/// The MariaDB dialect (feature `mariadb`, MariaDB 10.5 or later):
/// [`MariaDbStore`](crate::MariaDbStore). MySQL is not supported: the statements need
/// `INSERT … RETURNING` and `DELETE … RETURNING`, which only MariaDB has.
#[derive(Debug, Clone, Copy)]
pub struct MariaDb;

/// The session of the store's own connections: READ COMMITTED, in UTC.
const SESSION: &str = include_str!("../../queries/mariadb/session.sql");

/// Serialises concurrent `migrate()` calls (several replicas starting at once); answers 1 once
/// held, 0 after the timeout, NULL on an error.
const MIGRATION_LOCK: &str = include_str!("../../queries/mariadb/migration_lock.sql");

/// Ends [`MIGRATION_LOCK`].
const MIGRATION_UNLOCK: &str = include_str!("../../queries/mariadb/migration_unlock.sql");

/// The time zone UTC for the migration script's run, the session's own kept aside.
const MIGRATION_TIME_ZONE: &str = include_str!("../../queries/mariadb/migration_time_zone.sql");

/// Sets back the session's own time zone after the migration script's run.
const MIGRATION_TIME_ZONE_RESTORE: &str =
    include_str!("../../queries/mariadb/migration_time_zone_restore.sql");

/// The table's columns (none: no table).
const COLUMNS: &str = include_str!("../../queries/mariadb/columns.sql");

/// How many of the two indexes exist.
const INDEXES: &str = include_str!("../../queries/mariadb/indexes.sql");

/// How long a migration waits for another replica's migration.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The table's columns, in lower case.
async fn columns(
    connection: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    table: &crate::TableName,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(statement(COLUMNS)))
        .bind(table.as_str())
        .fetch_all(&mut **connection)
        .await?;
    Ok(rows.into_iter().map(|(column,)| column).collect())
}

impl Dialect for MariaDb {
    type Database = sqlx::MySql;
}

impl Sealed for MariaDb {
    const MAX_CONNECTIONS: u32 = 16;
    const SQL: Templates = Templates {
        claim: include_str!("../../queries/mariadb/claim.sql"),
        claim_binds: &[0, 1, 2, 3, 3, 2],
        state: None,
        renew: include_str!("../../queries/mariadb/renew.sql"),
        complete: include_str!("../../queries/mariadb/complete.sql"),
        release: include_str!("../../queries/mariadb/release.sql"),
        purge: &[
            include_str!("../../queries/mariadb/purge_expired.sql"),
            include_str!("../../queries/mariadb/purge_unexpiring.sql"),
        ],
        adopt: &[],
        cron_purge: include_str!("../../queries/mariadb/cron_purge.sql"),
        schema: include_str!("../../migrations/mariadb.sql"),
        inbox: None,
    };

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
        let (indexes,): (i64,) = sqlx::query_as(AssertSqlSafe(statement(INDEXES)))
            .bind(table.as_str())
            .bind(table.index_name())
            .bind(table.expiry_index_name())
            .fetch_one(&mut *connection)
            .await?;
        if has_store_columns(&present) && indexes == 2 {
            return Ok(());
        }
        let (locked,): (Option<i64>,) = sqlx::query_as(AssertSqlSafe(statement(MIGRATION_LOCK)))
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
                .execute(AssertSqlSafe(statement(MIGRATION_TIME_ZONE)))
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
                .execute(AssertSqlSafe(statement(MIGRATION_TIME_ZONE_RESTORE)))
                .await?;
            result
        }
        .await;
        sqlx::query(AssertSqlSafe(statement(MIGRATION_UNLOCK)))
            .bind(table.as_str())
            .execute(&mut *connection)
            .await?;
        migrated
    }

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let mut connection = store.pool().acquire().await?;
        let [expired, unexpiring] = &store.queries().purge[..] else {
            unreachable!("two purge files")
        };
        let expired = sqlx::query(AssertSqlSafe(settings(&mut connection, expired).await?))
            .bind(batch)
            .execute(&mut *connection)
            .await?
            .rows_affected();
        let unexpiring = sqlx::query(AssertSqlSafe(settings(&mut connection, unexpiring).await?))
            .bind(micros(retention))
            .bind(batch)
            .execute(&mut *connection)
            .await?
            .rows_affected();
        Ok(expired + unexpiring)
    }
}

/// Runs every statement of `file` but its last on `connection` (the settings of its
/// transaction): the last one.
async fn settings(
    connection: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    file: &[Arc<str>],
) -> Result<Arc<str>, sqlx::Error> {
    let (last, settings) = file.split_last().expect("a statement");
    for setting in settings {
        connection.execute(AssertSqlSafe(setting.clone())).await?;
    }
    Ok(last.clone())
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
                    for setting in statements(SESSION) {
                        connection.execute(AssertSqlSafe(setting)).await?;
                    }
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
        let statements =
            crate::queries::statements(<super::MariaDb as crate::dialect::Sealed>::SQL.schema);
        assert_eq!(statements.len(), 5);
        assert!(statements[0].starts_with("CREATE TABLE IF NOT EXISTS"));
        assert!(statements[1].starts_with("ALTER TABLE"));
        assert!(statements[2].starts_with("UPDATE"));
        assert!(statements[3].starts_with("CREATE INDEX IF NOT EXISTS"));
        assert!(statements[4].starts_with("CREATE INDEX IF NOT EXISTS"));
    }
}
