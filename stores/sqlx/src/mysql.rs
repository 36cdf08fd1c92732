//! [`MariaDbStore`]: the idempotency store over MariaDB.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore, StoreError};
use sqlx::{
    AssertSqlSafe, Database, Executor, MySql, MySqlPool,
    mysql::{MySqlConnectOptions, MySqlPoolOptions},
    query::Query,
};

use crate::{
    Error, TableName,
    claim::{Queries, claim_from_row},
    error::{microseconds, store_error},
    purge::Purge,
};

/// The schema, for the default table: `migrations/mysql.sql`.
pub(crate) const SCHEMA: &str = include_str!("../migrations/mysql.sql");

/// Claim in one statement. On a duplicate key the row is taken over if its expiry has passed
/// and left as it is otherwise; `RETURNING` reports the row as it now is (completed, or in
/// flight) and whether this statement wrote it (its `processed_at` is the statement's time):
/// then the claim acquired the event. `expires_at` is assigned last: MariaDB
/// evaluates the assignments in order, so every condition still sees the old expiry.
/// `UTC_TIMESTAMP(6)` is the statement's start: one clock reading.
const CLAIM: &str = "\
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), 'in_flight', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at), processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'in_flight', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)
RETURNING state, claim_token, processed_at = UTC_TIMESTAMP(6)";

/// Renew in one statement: extend the token's live claim, or record it again when the event has
/// no live record; another owner's live record (and the token's own live completion) is left
/// as it is. `RETURNING` reports the owner as it now is: the token means `true`. MariaDB
/// evaluates the assignments in order: `state` and `claim_token` change only when the row had
/// expired, so the last condition still reads the old owner and state, and `expires_at`,
/// assigned last, is the old expiry in every condition.
const RENEW: &str = "\
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
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
/// it now is: the token means `true`. Evaluated in order, as in [`RENEW`].
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
WHERE event_id = ? AND state = 'in_flight' AND claim_token = ? AND expires_at > UTC_TIMESTAMP(6)";

/// Every row claimed more than the retention ago, but a live claim; through the
/// `processed_at` index.
const PURGE: &str = "\
DELETE FROM {table}
WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND (state = 'completed' OR expires_at <= UTC_TIMESTAMP(6))";

/// Serialises concurrent `migrate()` calls (several replicas starting at once).
const MIGRATION_LOCK: &str = "SELECT GET_LOCK('sangho_webhook_sqlx_migrate', 30)";
const MIGRATION_UNLOCK: &str = "SELECT RELEASE_LOCK('sangho_webhook_sqlx_migrate')";

/// The statements for `table`.
fn queries(table: &TableName) -> Queries {
    Queries::new(table, [CLAIM, RENEW, COMPLETE, RELEASE, PURGE], &[])
}

/// The idempotency store over MariaDB 10.5 or later (feature `mysql`): durable, and shared by
/// every replica that uses the same database. MySQL is not supported: the claim needs
/// `INSERT … RETURNING`, which only MariaDB has.
///
/// The table keeps the seed's columns (`event_id`, case-sensitive ASCII; `event_type`;
/// `processed_at`: when the event was last claimed, indexed for the purge) and adds `state`
/// (`in_flight` or `completed`), `claim_token` (the owner of a claim) and `expires_at` (the end
/// of the lease, or of the retention once completed); create it with
/// [`migrate`](Self::migrate) or `migrations/mysql.sql`. Each operation is one statement:
/// **claim** is `INSERT … ON DUPLICATE KEY UPDATE … RETURNING …` (the row is taken over only
/// if its expiry has passed; `RETURNING` tells acquired, completed and in flight apart; InnoDB
/// locks the row, so exactly one of any number of concurrent claims wins), **renew** and
/// **complete** one upsert each (taken only when the row is the token's or no longer live),
/// **release** an owner-checked `DELETE` of a live claim.
/// Every time is the server's `UTC_TIMESTAMP(6)`, fixed for the duration of a statement.
///
/// ```no_run
/// use std::time::Duration;
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret};
/// use sangho_webhook_sqlx::MariaDbStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MariaDbStore::connect("mysql://root@127.0.0.1:3306/app").await?;
/// store.migrate().await?;
/// let purge = store.spawn_purge(Duration::from_secs(72 * 3600), Duration::from_secs(3600));
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_…")?, store);
/// // … serve with the layer; on shutdown:
/// purge.stop().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MariaDbStore {
    pool: MySqlPool,
    table: TableName,
    queries: Arc<Queries>,
}

impl MariaDbStore {
    /// How long [`connect`](Self::connect)'s pool waits for a connection before an operation
    /// fails (with [`StoreError::Timeout`]): shorter than the layer's default store timeout.
    pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

    /// How many connections [`connect`](Self::connect)'s pool opens at most.
    pub const MAX_CONNECTIONS: u32 = 16;

    /// A store over `pool`, on the default table `processed_webhook_events`. Build the pool
    /// with this crate's re-exported [`sqlx`](crate::sqlx), with an
    /// [`acquire_timeout`](sqlx::pool::PoolOptions::acquire_timeout) shorter than the layer's
    /// store timeout.
    pub fn new(pool: MySqlPool) -> Self {
        let table = TableName::default();
        Self {
            queries: Arc::new(queries(&table)),
            pool,
            table,
        }
    }

    /// Connects to `url` (`mysql://user:password@host:port/database`) with a pool of at most
    /// [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections and an acquire (and connect)
    /// timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT), and opens one connection to check
    /// the URL.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid or the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options: MySqlConnectOptions = url.parse()?;
        let pool = MySqlPoolOptions::new()
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
            queries: Arc::new(queries(&table)),
            table,
            pool: self.pool,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The schema script for this store's table: `migrations/mysql.sql` with the table and
    /// index names substituted.
    pub fn schema(&self) -> String {
        self.table.schema(SCHEMA)
    }

    /// Creates the table and its index if they are missing. Safe to call on every start, from
    /// several replicas at once (they take turns on a named lock).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database refuses (e.g. no `CREATE` privilege).
    pub async fn migrate(&self) -> Result<(), Error> {
        let mut connection = self.pool.acquire().await?;
        connection.execute(MIGRATION_LOCK).await?;
        let mut migrated = Ok(());
        for statement in statements(&self.schema()) {
            if let Err(error) = connection.execute(AssertSqlSafe(statement)).await {
                migrated = Err(error);
                break;
            }
        }
        connection.execute(MIGRATION_UNLOCK).await?;
        Ok(migrated?)
    }

    /// Deletes the rows claimed more than `retention` ago (their `processed_at`), except a
    /// claim whose lease still runs: the completed events past the retention, and the
    /// abandoned claims once they are that old. Answers how many rows it deleted.
    ///
    /// The same, as plain SQL for cron, for the default table:
    ///
    /// ```sql
    /// DELETE FROM processed_webhook_events
    /// WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL 72 HOUR
    ///   AND (state = 'completed' OR expires_at <= UTC_TIMESTAMP(6));
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the statement fails.
    pub async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        let result = sqlx::query(AssertSqlSafe(self.queries.purge.clone()))
            .bind(microseconds(retention))
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

    /// Runs an owner-checked `DELETE` (release): whether it removed the claim's row.
    async fn owner_checked(
        &self,
        query: Query<'_, MySql, <MySql as Database>::Arguments>,
    ) -> Result<bool, StoreError> {
        let result = query
            .execute(&self.pool)
            .await
            .map_err(|error| self.error(error))?;
        Ok(result.rows_affected() == 1)
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

impl Purge for MariaDbStore {
    async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        MariaDbStore::purge(self, retention).await
    }
}

impl MariaDbStore {
    /// Runs an upsert that answers the row's owner (renew, complete): whether it is `token`.
    async fn owner_upsert(
        &self,
        sql: &Arc<str>,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        span: Duration,
    ) -> Result<bool, StoreError> {
        let (owner,): (Option<String>,) = sqlx::query_as(AssertSqlSafe(sql.clone()))
            .bind(event_id)
            .bind(event_type)
            .bind(token.as_str())
            .bind(microseconds(span))
            .fetch_one(&self.pool)
            .await
            .map_err(|error| self.error(error))?;
        Ok(owner.as_deref() == Some(token.as_str()))
    }
}

#[async_trait]
impl IdempotencyStore for MariaDbStore {
    async fn claim(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let (state, owner, fresh): (String, Option<String>, i64) =
            sqlx::query_as(AssertSqlSafe(self.queries.claim.clone()))
                .bind(event_id)
                .bind(event_type)
                .bind(token.as_str())
                .bind(microseconds(lease))
                .fetch_one(&self.pool)
                .await
                .map_err(|error| self.error(error))?;
        claim_from_row(token, &state, owner.as_deref(), fresh == 1)
    }

    async fn renew(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.owner_upsert(&self.queries.renew, event_id, event_type, token, lease)
            .await
    }

    async fn complete(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.owner_upsert(
            &self.queries.complete,
            event_id,
            event_type,
            token,
            retention,
        )
        .await
    }

    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        let query = sqlx::query(AssertSqlSafe(self.queries.release.clone()))
            .bind(event_id)
            .bind(token.as_str());
        self.owner_checked(query).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_script_splits_into_its_statements() {
        let statements = super::statements(super::SCHEMA);
        assert_eq!(statements.len(), 2);
        assert!(statements[0].starts_with("CREATE TABLE IF NOT EXISTS"));
        assert!(statements[1].starts_with("CREATE INDEX IF NOT EXISTS"));
    }
}
