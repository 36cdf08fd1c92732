//! [`SqlStore`]: the idempotency store over a SQL database, written once for every dialect.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use sangho_webhook::store::{
    Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal, StoreError,
};
use sqlx::Pool;
use tokio::sync::Notify;

use crate::{
    Error, PurgeTask, TableName,
    dialect::{Bind, Dialect, Sealed, micros},
    error::store_error,
    group_commit::{Answer, GroupCommit, GroupCommitter, Write, WriteError},
    purge::Purge,
    queries::{ClaimRow, Queries},
    turns::InboxTurns,
};

/// The idempotency store over a SQL database: [`PostgresStore`](crate::PostgresStore),
/// [`SqliteStore`](crate::SqliteStore) or [`MariaDbStore`](crate::MariaDbStore), one engine
/// whose [`Dialect`] supplies the SQL.
///
/// The table (default `processed_webhook_events`, see [`TableName`]) keeps the provider's
/// documented columns and adds three; create it with [`migrate`](Self::migrate) or the
/// crate's `migrations/` scripts:
///
/// | column | meaning |
/// | --- | --- |
/// | `event_id`, `event_type` | the event (primary key, and its type for operators) |
/// | `processed_at` | when the event was last claimed: the arrival of the delivery that processed it |
/// | `state` | `in_flight` or `completed` |
/// | `claim_token` | the owner of the record (kept once completed: a repeated completion by the same owner succeeds) |
/// | `expires_at` | in flight: the end of the lease; completed: the end of the retention |
///
/// A record whose `expires_at` has passed counts as no record at all. Each operation is one
/// statement (committed on its own, or with other callers' in one commit: see
/// [`with_group_commit`](Self::with_group_commit)):
///
/// - **claim**: `INSERT … ON CONFLICT (event_id) DO UPDATE … <only if the row's expiry has
///   passed> RETURNING …`: atomic and race-free, among any number of concurrent claims of one
///   event, across every server sharing the database, exactly one is acquired. (SQLite reads
///   the state of a duplicate with a second statement.)
/// - **renew**: the same upsert, taken only when the row is the token's or no longer live: it
///   extends the token's lease, or records its claim again.
/// - **complete**: the same upsert, recording the event as completed by the token unless
///   another owner's record is live: so a completion succeeds even after the token's own lease
///   ran out, when nobody took the event over.
/// - **release**: a `DELETE` of the token's live claim.
///
/// Every time is the database's clock, read once per statement: on PostgreSQL and MariaDB the
/// database server's, so the application hosts' clocks play no part; on SQLite, the clock of
/// the host running the application (SQLite runs in its process). A forward step of that
/// clock expires live claims at once: run NTP with slewing, never stepping a running host's
/// clock.
///
/// # Lock waits
///
/// A claim or a renewal waits while another transaction holds the event's row (PostgreSQL,
/// MariaDB: a handler's transaction with [`complete_in`](Self::complete_in), an operator's
/// `SELECT … FOR UPDATE`, a migration's table lock) or the database's write lock (SQLite, one
/// writer at a time). It waits at most the store's **lock timeout**,
/// [`LOCK_TIMEOUT`](Self::LOCK_TIMEOUT) (2 s) by default, then fails having changed nothing,
/// and the layer answers 503 (the provider retries). A claim that the database aborts on a
/// serialization failure or a deadlock is still answered as in flight (409): it lost a race
/// for the event.
///
/// | database | the bound | setting |
/// | --- | --- | --- |
/// | PostgreSQL | `lock_timeout`, for the statement's own transaction, set inside the statement (`set_config(…, true)`): no extra round trip, the session is left alone | `PostgresStore::with_lock_timeout` |
/// | MariaDB | `SET STATEMENT innodb_lock_wait_timeout = …, lock_wait_timeout = … FOR …` (whole seconds, rounded up) | `MariaDbStore::with_lock_timeout` |
/// | SQLite | the connection's busy timeout | `SqliteStore::connect` and `SqliteStore::connect_options` set `BUSY_TIMEOUT`, 2 s; on a pool of your own, its `busy_timeout` |
///
/// **Keep it below the layer's store timeout** (`with_store_timeout`, 5 s by default), with
/// room for the pool's acquire timeout ([`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT), 3 s with
/// `connect`): lock timeout plus acquire timeout at most the store timeout. The layer gives up
/// on a store call at its store timeout, answers 503 and releases the claim; but a statement
/// it gave up on still runs in the database. A claim still waiting for a lock would then land
/// after that release, as an in-flight claim nobody owns, and every delivery of the event
/// would get 409 until its lease (30 s by default) ran out; a renewal still waiting would
/// re-create the claim its owner had just released. Bounded below the store timeout, such a
/// statement fails in the database before the layer gives up on it.
///
/// Completions and releases wait as long as the lock is held: a completion that lands late
/// records what happened, a release that lands late removes only its own claim, and
/// [`complete_in`](Self::complete_in) runs in your transaction, under your session's settings.
///
/// In inbox mode, a PostgreSQL receipt (a redelivery of an event whose row a handler's
/// transaction holds) waits at most the lock timeout too, then answers 503 and the provider
/// delivers it again; the workers' renewals, completions and failures wait as long as the
/// lock is held, each on a connection of its own. With [group commit](GroupCommit) on, no
/// write waits for a held row in a group's writer: a group waits at most 100 ms for a row
/// lock, then each of its writes runs again on its own.
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Database>,
    table: TableName,
    synchronous_claims: bool,
    lock_timeout: Duration,
    adopted_retention: Duration,
    queries: Arc<Queries>,
    /// The same statements as a group commit runs them: with the group's lock timeout.
    grouped: Arc<Queries>,
    /// Wakes this process's inbox workers: one waiting worker for each stored receipt, every
    /// waiting one for a replay, a release or a notification.
    inbox_wake: Arc<Notify>,
    /// Set once the store listens for other processes' notifications.
    listening: Arc<AtomicBool>,
    /// The notifications owed to other processes, coalesced.
    notifier: Arc<Notifier>,
    /// The queue of writes grouped into one commit, and its writers.
    group: Arc<GroupCommitter<D>>,
    /// Inbox operations served together in turns, where the dialect serves them so.
    #[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
    turns: Arc<InboxTurns>,
}

/// The notifications a store owes other processes' inbox workers: set by receipts, abandons
/// and replays, sent by one task, one notification for every change since the last.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) struct Notifier {
    /// A notification is owed.
    pub(crate) pending: AtomicBool,
    /// Wakes the task that sends it.
    pub(crate) wake: Notify,
    /// Set once the task runs.
    pub(crate) started: AtomicBool,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            table: self.table.clone(),
            synchronous_claims: self.synchronous_claims,
            lock_timeout: self.lock_timeout,
            adopted_retention: self.adopted_retention,
            queries: self.queries.clone(),
            grouped: self.grouped.clone(),
            inbox_wake: self.inbox_wake.clone(),
            listening: self.listening.clone(),
            notifier: self.notifier.clone(),
            group: self.group.clone(),
            turns: self.turns.clone(),
        }
    }
}

impl<D: Dialect> fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStore")
            .field("database", &<D::Database as sqlx::Database>::NAME)
            .field("table", &self.table)
            .field("synchronous_claims", &self.synchronous_claims)
            .field("lock_timeout", &self.lock_timeout)
            .field("adopted_retention", &self.adopted_retention)
            .field("group_commit", &self.group.settings())
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlStore<D> {
    /// How long the pool of the store's `connect` waits for a connection before an operation
    /// fails (with [`StoreError::Timeout`]): shorter than the layer's default store timeout.
    pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

    /// How many connections the pool of the store's `connect` opens at most.
    pub const MAX_CONNECTIONS: u32 = <D as Sealed>::MAX_CONNECTIONS;

    /// How long a claim or a renewal waits for a lock held by another transaction before it
    /// fails, by default: 2 seconds. With [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT) it adds
    /// up to the layer's default store timeout (5 s), so that the layer never gives up on a
    /// claim that is still waiting; see [Lock waits](Self#lock-waits).
    pub const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

    /// How many rows one batch of [`purge`](Self::purge) deletes at most (of each kind).
    pub const PURGE_BATCH: u64 = 1000;

    /// How long [`purge`](Self::purge) pauses between batches.
    pub const PURGE_PAUSE: Duration = Duration::from_millis(20);

    /// The default [adopted retention](Self::with_adopted_retention): 72 hours, the layer's
    /// default retention.
    pub const ADOPTED_RETENTION: Duration = Duration::from_secs(72 * 3600);

    /// A store over `pool`, on the default table `processed_webhook_events`.
    ///
    /// Build the pool with this crate's re-exported [`sqlx`](crate::sqlx), and give it an
    /// [`acquire_timeout`](sqlx::pool::PoolOptions::acquire_timeout) shorter than the layer's
    /// store timeout, so that an unreachable database surfaces as a store error. The store
    /// leaves the pool's session settings as they are. Its claims and renewals bound their own
    /// lock waits by the [lock timeout](Self#lock-waits) (2 s), except on SQLite, where the
    /// bound is the pool's busy timeout: set one below the layer's store timeout (sqlx's
    /// default of 5 s is the layer's default store timeout, too long).
    pub fn new(pool: Pool<D::Database>) -> Self {
        let (table, synchronous_claims, lock_timeout) =
            (TableName::default(), true, Self::LOCK_TIMEOUT);
        Self {
            queries: Arc::new(Queries::new::<D>(&table, synchronous_claims, lock_timeout)),
            grouped: Arc::new(Queries::grouped::<D>(
                &table,
                synchronous_claims,
                grouped_lock_timeout::<D>(lock_timeout),
            )),
            group: Arc::new(GroupCommitter::new(pool.clone(), D::GROUP_COMMIT)),
            turns: Arc::default(),
            pool,
            table,
            synchronous_claims,
            lock_timeout,
            adopted_retention: Self::ADOPTED_RETENTION,
            inbox_wake: Arc::new(Notify::new()),
            listening: Arc::new(AtomicBool::new(false)),
            notifier: Arc::default(),
        }
    }

    /// The notifications owed to other processes.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn notifier(&self) -> &Arc<Notifier> {
        &self.notifier
    }

    /// What wakes this process's inbox workers.
    pub(crate) fn inbox_wake(&self) -> &Arc<Notify> {
        &self.inbox_wake
    }

    /// Whether this call is the first to start listening for notifications.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn start_listening(&self) -> bool {
        !self.listening.swap(true, Ordering::AcqRel)
    }

    /// The store with its statements prepared again for its current settings.
    fn prepared(self) -> Self {
        Self {
            queries: Arc::new(Queries::new::<D>(
                &self.table,
                self.synchronous_claims,
                self.lock_timeout,
            )),
            grouped: Arc::new(Queries::grouped::<D>(
                &self.table,
                self.synchronous_claims,
                grouped_lock_timeout::<D>(self.lock_timeout),
            )),
            // Its turns run the statements of the settings they started with.
            turns: Arc::default(),
            ..self
        }
    }

    /// How long the rows of an adopted table count as completed: [`migrate`](Self::migrate)
    /// upgrades a table of the provider's documented schema (`event_id`, `event_type`,
    /// `processed_at`) in place, and each row already in it counts as a completed event until
    /// its `processed_at` (or, without one, the time of the upgrade) plus this. Set it to the
    /// layer's retention; the default is [`ADOPTED_RETENTION`](Self::ADOPTED_RETENTION).
    #[must_use]
    pub fn with_adopted_retention(self, retention: Duration) -> Self {
        Self {
            adopted_retention: retention,
            ..self
        }
    }

    pub(crate) fn adopted_retention(&self) -> Duration {
        self.adopted_retention
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
        Self { table, ..self }.prepared()
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn set_synchronous_claims(self, synchronous: bool) -> Self {
        Self {
            synchronous_claims: synchronous,
            ..self
        }
        .prepared()
    }

    /// Bounds the lock waits of claims and renewals by `timeout` (see
    /// [Lock waits](Self#lock-waits)), for the dialects that set it in the statement.
    #[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
    pub(crate) fn set_lock_timeout(self, timeout: Duration) -> Self {
        Self {
            lock_timeout: timeout,
            ..self
        }
        .prepared()
    }

    /// How long a claim or a renewal waits for a lock held by another transaction.
    #[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
    pub(crate) fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    /// Groups concurrent writes into one commit as `settings` say (see [`GroupCommit`]):
    /// claims, renewals and completions, and inbox mode's receipts, takes and settlements.
    /// Each caller is answered once its own write is durable, with the answer its statement
    /// gives on its own. [`GroupCommit::OFF`] writes each in its own commit.
    #[must_use]
    pub fn with_group_commit(self, settings: GroupCommit) -> Self {
        Self {
            group: Arc::new(GroupCommitter::new(self.pool.clone(), settings)),
            ..self
        }
    }

    /// How the store groups concurrent writes into one commit.
    pub fn group_commit(&self) -> GroupCommit {
        self.group.settings()
    }

    /// Whether a write that commits asynchronously when `asynchronous` must run alone: where
    /// its setting would carry over to the rest of a group.
    pub(crate) fn commits_asynchronously(&self, asynchronous: bool) -> bool {
        asynchronous && !D::GROUP_ASYNCHRONOUS
    }

    /// Writes `write` (in a group, when grouping is on): its answer, once it is durable.
    pub(crate) async fn write(&self, write: Write) -> Result<Answer, WriteError> {
        self.group.write(write).await
    }

    /// A failed write, as the store's operations answer it.
    pub(crate) fn write_error(&self, error: WriteError) -> StoreError {
        match error {
            WriteError::Database(error) => self.error(error),
            WriteError::Group(error) => StoreError::backend(error),
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<D::Database> {
        &self.pool
    }

    /// The table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The migration script for this store's table: the crate's `migrations/` script of its
    /// database, with the table and index names substituted. Run it with your own migration
    /// tool if you prefer.
    pub fn schema(&self) -> String {
        self.table.schema(D::SQL.schema)
    }

    /// Creates the table and its indexes if they are missing, or adopts a table of the
    /// provider's documented schema: its columns keep their types, the store's columns are
    /// added, and its rows count as completed events for the
    /// [adopted retention](Self::with_adopted_retention). A table of that name that lacks
    /// `event_id` or `event_type` is refused, and left as it is. Safe to call on every start,
    /// from several replicas at once (they take turns on a lock); once the table is up to date
    /// it only reads the catalog.
    ///
    /// # A busy table
    ///
    /// On PostgreSQL and MariaDB the upgrade of a table of the previous release (inbox mode's
    /// columns, its state check, its index) runs while the traffic goes on, e.g. while instances of
    /// the previous release still claim on the table during a rolling deploy. It does not rewrite
    /// the table: the columns are added to the catalog only (MariaDB: `ALGORITHM=INSTANT`), the
    /// state's check is replaced without a scan, and the index of unfinished events is built beside
    /// the traffic (PostgreSQL: `CREATE INDEX CONCURRENTLY`; MariaDB: `ALGORITHM=INPLACE,
    /// LOCK=NONE`). And it never blocks the claims for long. Changing the table needs its exclusive
    /// lock for a moment (PostgreSQL: the `ALTER TABLE`'s transaction; MariaDB: each `ALTER TABLE`,
    /// and the index build at its start and at its end), which waits for every transaction that
    /// holds the table, and every claim that arrives meanwhile queues behind that wait. So each try
    /// waits for a transaction that holds the table (a handler's transaction with
    /// [`complete_in`](Self::complete_in), a report) at most **0.5 s** (MariaDB's index build: 1 s,
    /// as MariaDB counts that wait in whole seconds), then gives up, lets the queued claims go on,
    /// and tries again after 1 s, for 30 s on PostgreSQL and 10 s on MariaDB ([`Error::TableBusy`]
    /// after that; the next `migrate()` carries on from there). Measured on a table of 1 000 000
    /// rows under the previous release's claims, with a transaction holding the table for 3 s: no
    /// claim failed, the longest waited 0.5 s (RELIABILITY.md, section 7). The scripts in
    /// `migrations/` set the same waits in their statements. On SQLite, the table of the previous
    /// release, or one created `WITHOUT ROWID`, is rebuilt once instead (see the crate's README).
    ///
    /// # Errors
    ///
    /// - [`Error::IncompatibleTable`] for a table the store cannot use, naming the missing
    ///   columns;
    /// - [`Error::MigrationLocked`] when another migration held the lock for too long;
    /// - [`Error::TableBusy`] when another transaction held the table every time the upgrade
    ///   tried to change it (see [A busy table](#a-busy-table));
    /// - [`Error::Database`] if the database refuses (e.g. no `CREATE` privilege).
    pub async fn migrate(&self) -> Result<(), Error> {
        D::migrate(self).await
    }

    /// Deletes the rows past their own expiry: completed events past their retention (as
    /// the layer recorded it), and abandoned claims past their lease (harmless either way: a
    /// delivery would take them over). A row written by another tool without an expiry
    /// counts as completed until `retention` after its `processed_at`. Answers how many rows
    /// it deleted. Never a live record.
    ///
    /// It deletes in batches of [`PURGE_BATCH`](Self::PURGE_BATCH) rows, each its own short
    /// transaction at READ COMMITTED under a statement and a lock timeout, and pauses
    /// [`PURGE_PAUSE`](Self::PURGE_PAUSE) between batches: however large the backlog, a
    /// claim never waits behind the purge for more than one batch. Times are the database's
    /// and stored in UTC (or as points in time), so the answer does not depend on any
    /// session's time zone. For cron, [`cron_purge_sql`](Self::cron_purge_sql) is the same
    /// as plain SQL.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if a statement fails (the batches before it stay deleted).
    pub async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        let mut deleted = 0;
        loop {
            let batch = D::purge_batch(self, retention, Self::PURGE_BATCH).await?;
            deleted += batch;
            if batch < Self::PURGE_BATCH {
                return Ok(deleted);
            }
            tokio::time::sleep(Self::PURGE_PAUSE).await;
        }
    }

    /// One batch of the purge as plain SQL, for this store's table, to run from cron (repeat
    /// it until it deletes nothing). It gives the same answer from a session in any time zone.
    ///
    /// ```
    /// # #[cfg(feature = "postgres")] {
    /// use sangho_webhook_sqlx::{PostgresStore, sqlx::postgres::PgPoolOptions};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let pool = PgPoolOptions::new().connect_lazy("postgres://localhost/app").unwrap();
    /// let sql = PostgresStore::new(pool).cron_purge_sql();
    /// assert!(sql.starts_with("DELETE FROM processed_webhook_events"));
    /// # });
    /// # }
    /// ```
    pub fn cron_purge_sql(&self) -> String {
        self.queries.cron_purge.clone()
    }

    /// Runs [`purge`](Self::purge)`(retention)` now and then every `period` on a background task
    /// until the returned [`PurgeTask`] is stopped or dropped.
    ///
    /// # Panics
    ///
    /// If called outside a Tokio runtime.
    pub fn spawn_purge(&self, retention: Duration, period: Duration) -> PurgeTask {
        PurgeTask::spawn(self.clone(), retention, period)
    }

    fn error(&self, error: sqlx::Error) -> StoreError {
        store_error(error, self.pool.options().get_acquire_timeout())
    }

    /// A database error, as the store's operations answer it.
    pub(crate) fn store_error(&self, error: sqlx::Error) -> StoreError {
        self.error(error)
    }

    /// The store's statements, rendered for its table and settings.
    pub(crate) fn queries(&self) -> &Queries {
        &self.queries
    }

    /// Inbox operations served together in turns (see [`InboxTurns`]).
    #[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
    pub(crate) fn inbox_turns(&self) -> &InboxTurns {
        &self.turns
    }

    /// The store's statements as a group commit runs them.
    pub(crate) fn grouped_queries(&self) -> &Queries {
        &self.grouped
    }

    /// Runs the claim statement (and, where the dialect needs it, the state statement) for
    /// `binds` (event id, event type, token, lease): what the claim found.
    async fn claim_row(
        &self,
        event_id: &str,
        binds: &[Bind<'_>; 4],
    ) -> Result<ClaimRow, StoreError> {
        let claim_binds: Vec<Bind<'_>> =
            D::SQL.claim_binds.iter().map(|&bind| binds[bind]).collect();
        // A live record: completed, or another claim in flight. The state statement (where
        // the dialect has one) reads which; gone since (released, purged): it was in flight.
        let claim = Write::text(&self.queries.claim, &claim_binds)
            .in_lane_of(event_id)
            .grouped_as(&self.grouped.claim)
            .in_many(self.grouped.many.as_ref().map(|many| &many.claim))
            .otherwise(self.queries.state.as_ref())
            .alone_if(
                self.commits_asynchronously(!self.synchronous_claims)
                    || self.group_commit().claims_alone(),
            );
        let status = match self.write(claim).await {
            Ok(answer) => answer.into_text(),
            // The database aborted the claim to resolve a conflict with a concurrent one (a
            // serialization failure under a stricter isolation level than READ COMMITTED, or
            // a deadlock): another delivery is claiming the event right now. A lock wait that
            // ran out of the store's lock timeout is not one: it is a store error (503).
            Err(WriteError::Database(sqlx::Error::Database(error))) if D::is_conflict(&*error) => {
                tracing::debug!(event_id, %error, "a concurrent claim won the row");
                return Ok(ClaimRow::InFlight);
            }
            Err(error) => return Err(self.write_error(error)),
        };
        ClaimRow::decode(status.as_deref())
    }

    /// Runs an owner-answering write (renew, complete, release): whether the row is now, or
    /// was, `token`'s.
    async fn owned(&self, write: Write, token: &ClaimToken) -> Result<bool, StoreError> {
        let owner = self
            .write(write)
            .await
            .map_err(|error| self.write_error(error))?
            .into_text();
        Ok(owner.as_deref() == Some(token.as_str()))
    }
}

/// How long a grouped claim or renewal waits for a row lock: the dialect's bound for groups,
/// never more than the store's own.
fn grouped_lock_timeout<D: Dialect>(lock_timeout: Duration) -> Duration {
    D::GROUP_LOCK_TIMEOUT.map_or(lock_timeout, |bound| bound.min(lock_timeout))
}

impl<D: Dialect> Purge for SqlStore<D> {
    async fn purge(&self, retention: Duration) -> Result<u64, Error> {
        SqlStore::purge(self, retention).await
    }
}

#[async_trait]
impl<D: Dialect> IdempotencyStore for SqlStore<D> {
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        let (event_id, event_type, token) =
            (claimant.event_id, claimant.event_type, claimant.token);
        let binds = [
            Bind::Text(event_id),
            Bind::Text(event_type),
            Bind::Text(token.as_str()),
            Bind::Int(micros(lease)),
        ];
        self.claim_row(event_id, &binds).await.map(Claim::from)
    }

    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        let token = claimant.token;
        let binds = [
            Bind::Text(claimant.event_id),
            Bind::Text(claimant.event_type),
            Bind::Text(token.as_str()),
            Bind::Int(micros(lease)),
        ];
        Ok(
            match self
                .owned(
                    Write::text(&self.queries.renew, &binds)
                        .in_lane_of(claimant.event_id)
                        .grouped_as(&self.grouped.renew)
                        .alone_if(self.commits_asynchronously(!self.synchronous_claims)),
                    token,
                )
                .await?
            {
                true => Renewal::Held,
                false => Renewal::TakenOver,
            },
        )
    }

    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let token = claimant.token;
        let binds = [
            Bind::Text(claimant.event_id),
            Bind::Text(claimant.event_type),
            Bind::Text(token.as_str()),
            Bind::Int(micros(retention)),
        ];
        Ok(
            match self
                .owned(
                    Write::text(&self.queries.complete, &binds)
                        .in_lane_of(claimant.event_id)
                        .grouped_as(&self.grouped.complete)
                        .in_many(self.grouped.many.as_ref().map(|many| &many.complete)),
                    token,
                )
                .await?
            {
                true => Completion::Recorded,
                false => Completion::TakenOver,
            },
        )
    }

    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        let token = claimant.token;
        let binds = [Bind::Text(claimant.event_id), Bind::Text(token.as_str())];
        Ok(
            match self
                .owned(
                    Write::text(&self.queries.release, &binds)
                        .in_lane_of(claimant.event_id)
                        .grouped_as(&self.grouped.release)
                        .alone_if(self.commits_asynchronously(true)),
                    token,
                )
                .await?
            {
                true => Release::Released,
                false => Release::NotHeld,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_claims_renewals_and_receipts_set_their_own_lock_timeout() {
        let queries = crate::queries::Queries::new::<crate::dialect::Postgres>(
            &crate::TableName::default(),
            true,
            Duration::from_millis(1500),
        );
        let bound = "set_config('lock_timeout', '1500ms', true)";
        assert!(queries.claim.contains(bound), "{}", queries.claim);
        assert!(queries.renew.contains(bound), "{}", queries.renew);
        let receive = &queries.inbox.as_ref().expect("inbox mode").receive.sql;
        assert!(receive.contains(bound), "{receive}");
        let unbounded = [Some(&queries.complete), Some(&queries.release)];
        for unbounded in unbounded
            .into_iter()
            .chain([queries.state.as_ref()])
            .flatten()
        {
            assert!(!unbounded.contains("lock_timeout"), "{unbounded}");
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_groups_wait_for_a_lock_as_long_as_their_claims_do() {
        use crate::dialect::{Postgres, Sealed};
        let bound = <Postgres as Sealed>::GROUP_LOCK_TIMEOUT.expect("a bound for groups");
        let begin = <Postgres as Sealed>::GROUP_BEGIN.expect("a BEGIN that sets it");
        let ms = bound.as_millis();
        // One query begins the transaction and sets its bound: one round trip.
        assert!(begin.contains("\nBEGIN;\n"), "{begin}");
        assert!(
            begin.contains(&format!("SET LOCAL lock_timeout = '{ms}ms';")),
            "{begin}"
        );
        let store = crate::queries::Queries::new::<Postgres>(
            &crate::TableName::default(),
            true,
            super::grouped_lock_timeout::<Postgres>(super::SqlStore::<Postgres>::LOCK_TIMEOUT),
        );
        let claim_bound = format!("set_config('lock_timeout', '{ms}ms', true)");
        assert!(store.claim.contains(&claim_bound), "{}", store.claim);
        assert!(store.renew.contains(&claim_bound), "{}", store.renew);
    }

    #[cfg(feature = "mariadb")]
    #[test]
    fn mariadb_claims_and_renewals_set_their_own_lock_wait_timeouts() {
        let queries = crate::queries::Queries::new::<crate::dialect::MariaDb>(
            &crate::TableName::default(),
            true,
            Duration::from_millis(1500),
        );
        let bound = "SET STATEMENT innodb_lock_wait_timeout = 2, lock_wait_timeout = 2 FOR\nINSERT";
        assert!(queries.claim.starts_with(bound), "{}", queries.claim);
        assert!(queries.renew.starts_with(bound), "{}", queries.renew);
        // A completion and a release wait as the session says.
        let session =
            "SET STATEMENT innodb_lock_wait_timeout = @@SESSION.innodb_lock_wait_timeout FOR\n";
        for unbounded in [&queries.complete, &queries.release] {
            assert!(unbounded.starts_with(session), "{unbounded}");
        }
    }

    #[cfg(feature = "mariadb")]
    #[test]
    fn mariadb_groups_wait_for_no_row_lock() {
        use crate::dialect::{MariaDb, Sealed};
        let table = crate::TableName::default();
        let timeout =
            super::grouped_lock_timeout::<MariaDb>(super::SqlStore::<MariaDb>::LOCK_TIMEOUT);
        assert_eq!(timeout, Duration::ZERO);
        let grouped = crate::queries::Queries::grouped::<MariaDb>(&table, true, timeout);
        let none = "SET STATEMENT innodb_lock_wait_timeout = 0, lock_wait_timeout = 0 FOR\nINSERT";
        assert!(grouped.claim.starts_with(none), "{}", grouped.claim);
        assert!(grouped.renew.starts_with(none), "{}", grouped.renew);
        let none = "SET STATEMENT innodb_lock_wait_timeout = 0 FOR\n";
        for bounded in [&grouped.complete, &grouped.release] {
            assert!(bounded.starts_with(none), "{bounded}");
        }
        let many = <MariaDb as Sealed>::MANY.expect("statements of many rows");
        // The statements of many rows run only in groups, with the group's bound.
        for file in [many.claim, many.complete].into_iter().chain(many.receive) {
            assert!(
                file.contains("innodb_lock_wait_timeout = {lock_timeout_s}")
                    || file.contains("innodb_lock_wait_timeout = {completion_lock_timeout_s}"),
                "{file}"
            );
        }
    }
}
