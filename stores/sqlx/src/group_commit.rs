//! Group commit: the writes that callers of one store make at the same moment (claims,
//! renewals, completions; inbox receipts, takes and their settlements) are queued and written
//! together, in one transaction that costs one disk flush, instead of one flush each.
//!
//! A writer task takes what is waiting (no timer: a lone write is written at once), up to
//! [`GroupCommit`]'s bounds, runs the writes in one transaction (the claims, completions,
//! inbox receipts, workers' takes and workers' completions of distinct events each kind in one
//! statement of many rows, see [`Plan`]; the others each in its own statement), commits, and
//! only then answers each caller: every answer comes after the commit that made its write
//! durable, and is the answer the statement gives on its own. If a statement fails, the
//! transaction is rolled back and each write of the batch runs again on its own, so that one
//! write's failure is only its own. If the commit itself fails, every caller of the batch gets
//! that error, as each would have got it from its own commit. A write whose caller has gone
//! (its future dropped, e.g. a timeout) before the batch runs is never written.
//!
//! Where the dialect says so (SQLite), a group that is a single statement of many rows (only
//! receipts, only completions, only takes) runs as that statement alone, outside a
//! transaction: the statement is its own transaction, committed before it answers its last
//! row, and the group saves its `BEGIN` and `COMMIT`. If it fails, nothing of it was written,
//! and each write runs again on its own, as after any failed statement.
//!
//! Where the dialect says so (SQLite), a group of several statements of many rows that each
//! answer their rows by themselves (a drain's completions and takes; receipts beside them)
//! sends its `BEGIN` in one query with its first statement and its `COMMIT` with its last: two
//! round trips to the connection's thread fewer. A group with claims keeps its own `BEGIN` and
//! `COMMIT`: the claims' state read follows their statement. If any of it fails (a statement,
//! or the `BEGIN` or `COMMIT` with it), whatever is open is rolled back, nothing of the group
//! was acknowledged, and each write runs again on its own, as after a failed statement (a
//! failed `COMMIT` too: there, never `GroupCommitFailed`); a connection whose transaction could
//! not be ended is closed, never given back to the pool with it open.
//!
//! A writer keeps its connection from one group to the next while writes wait for it (a lone
//! write among them is written on it too), and gives it back to the pool once none waits: on a
//! pool of one connection, the writer and everything else (a handler's transaction, a write
//! that runs alone) take the connection in turn.
//!
//! Where the dialect says so (PostgreSQL, MariaDB), a write that finds its writer idle and no
//! write waiting for it is written by its caller, as the writer would write it alone, while it
//! holds the writer's turn: a lone request saves the hop to the writer and back, and the
//! writes that arrive meanwhile wait for it, in order.
//!
//! No write waits for a row lock in a writer's turn for longer than a group would (100 ms on
//! PostgreSQL, not at all on MariaDB): a lone write runs in the turn only if its statement for
//! groups bounds its own lock wait so (claims, renewals, receipts; on MariaDB completions and
//! releases too); any other (a PostgreSQL completion) runs alone outside the turn, on a
//! connection of its own, so that only it waits for a row a handler's transaction holds.

mod many;

use std::{collections::HashSet, fmt, sync::Arc};

pub(crate) use many::Many;

use sqlx::{AssertSqlSafe, Connection, Pool, pool::PoolConnection};
use tokio::sync::{mpsc, oneshot};

use crate::{
    dialect::{Bind, Dialect, Driver, TakenRow},
    queries::statements,
};

/// How a store groups concurrent writes into one commit (see the crate's README, "Group
/// commit"). [`SqliteStore`](crate::SqliteStore) groups by default
/// ([`GroupCommit::SQLITE`]), and so does [`PostgresStore`](crate::PostgresStore)
/// ([`GroupCommit::POSTGRES`]); `MariaDbStore` groups every write but today's mode's claims
/// ([`GroupCommit::MARIADB`] [with its claims alone](GroupCommit::with_claims_alone): each
/// claim in its own commit), and [`GroupCommit::MARIADB`] is its opt-in for every write.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use sangho_webhook_sqlx::{GroupCommit, SqliteStore, sqlx::sqlite::SqlitePoolOptions};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let pool = SqlitePoolOptions::new().connect_lazy("sqlite::memory:").unwrap();
/// let store = SqliteStore::new(pool)
///     .with_group_commit(GroupCommit::SQLITE.with_max_operations(32));
/// assert_eq!(store.group_commit().max_operations(), 32);
/// # });
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommit {
    max_operations: usize,
    max_bytes: usize,
    writers: usize,
    inbox_receipts_only: bool,
    claims_alone: bool,
}

impl GroupCommit {
    /// No grouping: every write is its own statement and commit.
    pub const OFF: Self = Self {
        max_operations: 1,
        max_bytes: usize::MAX,
        writers: 1,
        inbox_receipts_only: false,
        claims_alone: false,
    };

    /// SQLite's default: one writer (SQLite has one anyway), up to 64 writes or 4 MiB of
    /// bound values per commit.
    pub const SQLITE: Self = Self {
        max_operations: 64,
        max_bytes: 4 << 20,
        writers: 1,
        inbox_receipts_only: false,
        claims_alone: false,
    };

    /// PostgreSQL's default: two commits at once, each on a connection of the pool, up to 64
    /// writes or 4 MiB of bound values each; a write that finds its writer idle, and no write
    /// waiting for it, is written by its caller at once. See the crate's README for what it
    /// gains and costs.
    pub const POSTGRES: Self = Self {
        max_operations: 64,
        max_bytes: 4 << 20,
        writers: 2,
        inbox_receipts_only: false,
        claims_alone: false,
    };

    /// MariaDB's grouping of every write, **opt-in**: `MariaDbStore` groups every write but
    /// today's mode's claims by default (this setting
    /// [with its claims alone](Self::with_claims_alone)), and writes each claim in its own
    /// commit. One run of the project's test of two instances sharing a database, with this
    /// on, ran a handler twice for one event, and the cause is not found yet; do not turn it
    /// on in production before it is. Only a claim can let a handler run, so the default
    /// groups everything else. Two commits at once, each on a connection of the pool, up to
    /// 64 writes or 4 MiB of bound values each (well under the server's default
    /// `max_allowed_packet`, 16 MiB); a write that finds its writer idle, and no write waiting
    /// for it, is written by its caller at once. A group waits for no row lock: one that meets
    /// a row another transaction holds is rolled back, and each of its writes runs again on
    /// its own. Of inbox mode's writes, only receipts without an ordering key are grouped on
    /// MariaDB: a group's receipts are one statement of many rows, their sequence numbers
    /// drawn first. See the crate's README for what it gains and costs.
    pub const MARIADB: Self = Self {
        max_operations: 64,
        max_bytes: 4 << 20,
        writers: 2,
        inbox_receipts_only: false,
        claims_alone: false,
    };

    /// At most `operations` writes per commit (at least 1; 1 turns grouping off).
    #[must_use]
    pub const fn with_max_operations(self, operations: usize) -> Self {
        Self {
            max_operations: if operations == 0 { 1 } else { operations },
            ..self
        }
    }

    /// At most `bytes` of bound values (ids, tokens, bodies) per commit; a single write larger
    /// than this is written in a commit of its own.
    #[must_use]
    pub const fn with_max_bytes(self, bytes: usize) -> Self {
        Self {
            max_bytes: bytes,
            ..self
        }
    }

    /// Groups inbox mode's receipts (of events without an ordering key) only, when `only`:
    /// every other write (today's mode's claims, renewals, completions and releases; a
    /// worker's take or completion where the store groups those) is written in its own
    /// commit, as with [`GroupCommit::OFF`].
    ///
    /// A receipt only stores an event: a worker processes it once it takes the event's row
    /// under a lease, which no group writes. So grouping the receipts can change only how
    /// fast they are acknowledged, never how often an event is processed.
    ///
    /// ```
    /// use sangho_webhook_sqlx::GroupCommit;
    ///
    /// let receipts = GroupCommit::MARIADB.with_inbox_receipts_only(true);
    /// assert!(receipts.inbox_receipts_only() && receipts.is_on());
    /// assert!(!GroupCommit::MARIADB.inbox_receipts_only());
    /// ```
    #[must_use]
    pub const fn with_inbox_receipts_only(self, only: bool) -> Self {
        Self {
            inbox_receipts_only: only,
            ..self
        }
    }

    /// Writes each of today's mode's claims in a commit of its own, when `alone`, and groups
    /// the other writes as the rest of the settings say (completions, renewals, releases,
    /// inbox receipts). `MariaDbStore`'s default.
    ///
    /// Only a claim can let a handler run: grouping the other writes can change how fast they
    /// are answered, never how often an event is processed. So a store whose grouped claims
    /// are not yet trusted (see [`GroupCommit::MARIADB`]) still groups the rest.
    ///
    /// ```
    /// use sangho_webhook_sqlx::GroupCommit;
    ///
    /// let settings = GroupCommit::MARIADB.with_claims_alone(true);
    /// assert!(settings.claims_alone() && settings.is_on());
    /// assert!(!GroupCommit::MARIADB.claims_alone());
    /// ```
    #[must_use]
    pub const fn with_claims_alone(self, alone: bool) -> Self {
        Self {
            claims_alone: alone,
            ..self
        }
    }

    /// How many commits may run at once, each on a connection of the pool (at least 1).
    #[must_use]
    pub const fn with_writers(self, writers: usize) -> Self {
        Self {
            writers: if writers == 0 { 1 } else { writers },
            ..self
        }
    }

    /// The most writes per commit.
    pub const fn max_operations(&self) -> usize {
        self.max_operations
    }

    /// The most bytes of bound values per commit.
    pub const fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// How many commits may run at once.
    pub const fn writers(&self) -> usize {
        self.writers
    }

    /// Whether only inbox mode's receipts are grouped ([`Self::with_inbox_receipts_only`]).
    pub const fn inbox_receipts_only(&self) -> bool {
        self.inbox_receipts_only
    }

    /// Whether each claim is written in a commit of its own ([`Self::with_claims_alone`]).
    pub const fn claims_alone(&self) -> bool {
        self.claims_alone
    }

    /// Whether writes are grouped at all.
    pub const fn is_on(&self) -> bool {
        self.max_operations > 1
    }
}

/// The commit of a group of writes failed: each write of the group failed with it, and none
/// was applied. The source is the database's error, shared by every write of the group.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the commit of a group of {operations} writes failed")]
pub struct GroupCommitFailed {
    operations: usize,
    #[source]
    source: Arc<sqlx::Error>,
}

impl GroupCommitFailed {
    /// The failure of a group of `operations` writes, of `source`.
    #[cfg_attr(not(any(feature = "mariadb", feature = "postgres")), allow(dead_code))]
    pub(crate) fn new(operations: usize, source: sqlx::Error) -> Self {
        Self {
            operations,
            source: Arc::new(source),
        }
    }

    /// How many writes the failed group held.
    pub fn operations(&self) -> usize {
        self.operations
    }

    /// The database's error.
    #[cfg_attr(not(any(feature = "mariadb", feature = "postgres")), allow(dead_code))]
    pub(crate) fn database_error(&self) -> &sqlx::Error {
        &self.source
    }
}

/// A value bound to a queued statement, owned by the queue.
#[derive(Debug)]
enum Value {
    Text(String),
    Int(i64),
    OptText(Option<String>),
    OptInt(Option<i64>),
    Bytes(Vec<u8>),
}

impl Value {
    fn of(bind: Bind<'_>) -> Self {
        match bind {
            Bind::Text(text) => Self::Text(text.to_owned()),
            Bind::Int(int) => Self::Int(int),
            Bind::OptText(text) => Self::OptText(text.map(str::to_owned)),
            Bind::OptInt(int) => Self::OptInt(int),
            Bind::Bytes(bytes) => Self::Bytes(bytes.to_vec()),
        }
    }

    fn bind(&self) -> Bind<'_> {
        match self {
            Self::Text(text) => Bind::Text(text),
            Self::Int(int) => Bind::Int(*int),
            Self::OptText(text) => Bind::OptText(text.as_deref()),
            Self::OptInt(int) => Bind::OptInt(*int),
            Self::Bytes(bytes) => Bind::Bytes(bytes),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Text(text) | Self::OptText(Some(text)) => text.len(),
            Self::Bytes(bytes) => bytes.len(),
            Self::Int(_) | Self::OptText(None) | Self::OptInt(_) => 8,
        }
    }
}

/// One write: a statement with its binds, answering a text or a taken event.
#[derive(Debug)]
pub(crate) struct Write {
    sql: Arc<str>,
    binds: Vec<Value>,
    answer: AnswerKind,
    /// A statement to run, with the first bind, when `sql` answers no row (the claim's state).
    otherwise: Option<Arc<str>>,
    /// The statement to run instead of `sql` in a group (with the group's lock timeout).
    grouped: Option<Arc<str>>,
    /// Never grouped: run on its own.
    alone: bool,
    /// Which writer takes it (a hash of its event id or ordering key): the writes of one
    /// event never wait for each other's row locks across two writers' open transactions.
    lane: Option<u64>,
    /// The statement that writes it with others of its kind in a group, one row each.
    many: Option<Arc<Many>>,
    /// Its row's values in that statement, where they are not its own statement's binds.
    row: Option<Vec<Value>>,
    /// An inbox receipt: grouped where the store groups inbox receipts only.
    inbox_receipt: bool,
}

#[derive(Debug, Clone, Copy)]
enum AnswerKind {
    Text,
    Taken,
    Changed,
}

/// What a write answered: the first column of its first row, or the taken event.
#[derive(Debug)]
pub(crate) enum Answer {
    Text(Option<String>),
    Taken(Option<TakenRow>),
    // Only SQLite routes a write that answers a count through the group (its purge).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    Changed(u64),
}

impl Answer {
    /// The text answer (of a write built with [`Write::text`]).
    pub(crate) fn into_text(self) -> Option<String> {
        match self {
            Self::Text(text) => text,
            Self::Taken(_) | Self::Changed(_) => unreachable!("a text write answers text"),
        }
    }

    /// How many rows the write changed (of a write built with [`Write::execute`]).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn into_changed(self) -> u64 {
        match self {
            Self::Changed(rows) => rows,
            Self::Text(_) | Self::Taken(_) => unreachable!("an execute answers a count"),
        }
    }

    /// The taken event (of a write built with [`Write::take`]).
    pub(crate) fn into_taken(self) -> Option<TakenRow> {
        match self {
            Self::Taken(row) => row,
            Self::Text(_) | Self::Changed(_) => unreachable!("a take answers a taken row"),
        }
    }
}

/// Why a write failed: its own statement, or its group's commit.
#[derive(Debug)]
pub enum WriteError {
    /// The statement failed (run on its own, or the group could not start).
    Database(sqlx::Error),
    /// The group's commit failed.
    Group(GroupCommitFailed),
}

impl WriteError {
    /// The database's error: the statement's, or the failed group's.
    #[cfg_attr(not(any(feature = "mariadb", feature = "postgres")), allow(dead_code))]
    pub(crate) fn database_error(&self) -> &sqlx::Error {
        match self {
            Self::Database(error) => error,
            Self::Group(failed) => failed.database_error(),
        }
    }
}

impl Write {
    /// `sql` with `binds`, answering the first column of its first row.
    pub(crate) fn text(sql: &Arc<str>, binds: &[Bind<'_>]) -> Self {
        Self {
            sql: sql.clone(),
            binds: binds.iter().copied().map(Value::of).collect(),
            answer: AnswerKind::Text,
            otherwise: None,
            grouped: None,
            alone: false,
            lane: None,
            many: None,
            row: None,
            inbox_receipt: false,
        }
    }

    /// Inbox mode's take, answering the taken row.
    pub(crate) fn take(sql: &Arc<str>, binds: &[Bind<'_>]) -> Self {
        Self {
            answer: AnswerKind::Taken,
            ..Self::text(sql, binds)
        }
    }

    /// `sql` with `binds`, answering how many rows it changed.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn execute(sql: &Arc<str>, binds: &[Bind<'_>]) -> Self {
        Self {
            answer: AnswerKind::Changed,
            ..Self::text(sql, binds)
        }
    }

    /// Runs `grouped` instead of the statement when the write is part of a group: the
    /// statement with the group's bound on its lock wait. The same text bounds nothing more
    /// (a completion where the group bounds its waits itself, a claim whose store's lock
    /// timeout is already as short): the write has no statement of its own for groups.
    pub(crate) fn grouped_as(self, grouped: &Arc<str>) -> Self {
        Self {
            grouped: (**grouped != *self.sql).then(|| grouped.clone()),
            ..self
        }
    }

    /// Puts the write in the lane of `key` (an event id, an ordering key): the writes of one
    /// key are grouped by one writer, in the order they were queued.
    pub(crate) fn in_lane_of(self, key: &str) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        Self {
            lane: Some(hasher.finish()),
            ..self
        }
    }

    /// Writes it with the other writes of `many`'s kind of its group, in one statement of a
    /// row each, where the dialect has one (its binds are the row's values, its first the
    /// event id; it answers as its own statement would).
    pub(crate) fn in_many(self, many: Option<&Arc<Many>>) -> Self {
        Self {
            many: many.cloned(),
            ..self
        }
    }

    /// Binds `binds` (its event id first) for its row in its statement of many rows, where
    /// that statement binds more than its own statement (a receipt, and the waiting take it
    /// may be written taken by).
    pub(crate) fn with_row(self, binds: &[Bind<'_>]) -> Self {
        Self {
            row: Some(binds.iter().copied().map(Value::of).collect()),
            ..self
        }
    }

    /// The id of a write of many rows (its first bind): its event's id; a take's, its
    /// worker's token (unique: a take waits for no other write of its group).
    fn row_id(&self) -> Option<&str> {
        match self.binds.first() {
            Some(Value::Text(event_id)) => Some(event_id),
            _ => None,
        }
    }

    /// Whether the write may run alone in its lane's turn (by its writer, or by its caller
    /// while the writer is idle), where groups bound their lock waits (`bounded`): only if its
    /// statement alone bounds its own as a group does (a claim, a renewal, a receipt). Another
    /// (a completion) may wait for a row that a handler's transaction holds for as long as
    /// the transaction lasts: it runs alone, outside the turn, and only it waits.
    fn may_run_in_turn(&self, bounded: bool) -> bool {
        !bounded || self.grouped.is_some()
    }

    /// Marks the write an inbox receipt, which a store that groups inbox receipts only
    /// ([`GroupCommit::with_inbox_receipts_only`]) groups.
    pub(crate) fn of_inbox_receipt(self) -> Self {
        Self {
            inbox_receipt: true,
            ..self
        }
    }

    /// Never groups the write when `alone`: it runs in a transaction of its own.
    pub(crate) fn alone_if(self, alone: bool) -> Self {
        Self { alone, ..self }
    }

    /// Runs `otherwise` with the first bind when the statement answers no row.
    pub(crate) fn otherwise(self, otherwise: Option<&Arc<str>>) -> Self {
        Self {
            otherwise: otherwise.cloned(),
            ..self
        }
    }

    fn bytes(&self) -> usize {
        self.binds.iter().map(Value::len).sum::<usize>() + self.sql.len() / 8
    }

    /// Runs the write on `connection`, inside whatever transaction it has open.
    async fn run<DB: Driver>(
        &self,
        connection: &mut DB::Connection,
        in_group: bool,
    ) -> Result<Answer, sqlx::Error> {
        let binds: Vec<Bind<'_>> = self.binds.iter().map(Value::bind).collect();
        let sql = match (&self.grouped, in_group) {
            (Some(grouped), true) => grouped,
            _ => &self.sql,
        };
        match self.answer {
            AnswerKind::Changed => Ok(Answer::Changed(
                DB::execute_in(connection, sql, &binds).await?,
            )),
            AnswerKind::Taken => Ok(Answer::Taken(
                DB::fetch_taken_in(connection, sql, &binds).await?,
            )),
            AnswerKind::Text => {
                let text = DB::fetch_text_in(connection, sql, &binds).await?;
                match (&text, &self.otherwise) {
                    (None, Some(otherwise)) => Ok(Answer::Text(
                        DB::fetch_text_in(connection, otherwise, &binds[..1]).await?,
                    )),
                    _ => Ok(Answer::Text(text)),
                }
            }
        }
    }

    /// Runs the write in a transaction of its own.
    async fn run_alone<DB: Driver>(&self, pool: &Pool<DB>) -> Result<Answer, sqlx::Error> {
        self.run_on_pool(pool, false).await
    }

    /// Runs the write in a transaction of its own, as in a group if `as_grouped`.
    async fn run_on_pool<DB: Driver>(
        &self,
        pool: &Pool<DB>,
        as_grouped: bool,
    ) -> Result<Answer, sqlx::Error> {
        let mut connection = pool.acquire().await?;
        self.run::<DB>(&mut connection, as_grouped).await
    }
}

/// A write waiting for its group, and where its answer goes.
struct Queued {
    write: Write,
    reply: oneshot::Sender<Reply>,
}

/// What a writer tells a write's caller.
enum Reply {
    /// The write's answer (or its failure), once its group is committed.
    Done(Result<Answer, WriteError>),
    /// The group failed on a statement and was rolled back: the caller runs the write alone.
    RunAlone(Write),
}

/// The queue of one store's writes, and its writer tasks (started on the first write).
pub(crate) struct GroupCommitter<D: Dialect> {
    pool: Pool<D::Database>,
    settings: GroupCommit,
    /// How a group's transaction begins.
    framing: Framing,
    /// One lane per writer, once they run.
    lanes: std::sync::Mutex<Vec<Lane>>,
    /// The next writer of a write without a lane.
    next: std::sync::atomic::AtomicUsize,
}

impl<D: Dialect> fmt::Debug for GroupCommitter<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCommitter")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> GroupCommitter<D> {
    pub(crate) fn new(pool: Pool<D::Database>, settings: GroupCommit) -> Self {
        Self {
            pool,
            settings,
            framing: Framing {
                // Its statements in one query: one round trip.
                begin: D::GROUP_BEGIN.map(|begin| statements(begin).join(";\n").into()),
                one_statement_commits: D::GROUP_OF_ONE_STATEMENT_COMMITS_ITSELF,
                begin_and_commit_ride_along: D::GROUP_BEGIN_AND_COMMIT_RIDE_ALONG,
                bounded: D::GROUP_LOCK_TIMEOUT.is_some(),
            },
            lanes: std::sync::Mutex::new(Vec::new()),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub(crate) fn settings(&self) -> GroupCommit {
        self.settings
    }

    /// Writes `write`, in a group with whatever else is waiting when grouping is on: its
    /// answer, once the write is durable.
    pub(crate) async fn write(&self, write: Write) -> Result<Answer, WriteError> {
        let grouped = self.settings.is_on()
            && !write.alone
            && (write.inbox_receipt || !self.settings.inbox_receipts_only);
        if !grouped {
            return write
                .run_alone(&self.pool)
                .await
                .map_err(WriteError::Database);
        }
        let lane = self.lane(write.lane);
        if D::LONE_WRITE_BY_CALLER
            && let Some(turn) = lane.idle()
        {
            let bounded = self.framing.bounded;
            if !write.may_run_in_turn(bounded) {
                drop(turn);
                return write
                    .run_alone(&self.pool)
                    .await
                    .map_err(WriteError::Database);
            }
            // As the writer writes a lone write: bounded as in a group, so that the lane's
            // turn is never held long behind a row lock; alone with the store's bound
            // otherwise.
            let written = write.run_on_pool(&self.pool, bounded).await;
            drop(turn);
            return match written {
                Ok(answer) => Ok(answer),
                Err(_) if bounded => write
                    .run_alone(&self.pool)
                    .await
                    .map_err(WriteError::Database),
                Err(error) => Err(WriteError::Database(error)),
            };
        }
        let (reply, answer) = oneshot::channel();
        lane.waiting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Err(unsent) = lane.sender.send(Queued { write, reply }) {
            lane.waiting
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            // Its writer ended (its runtime shut down) since: the write runs alone.
            let write = unsent.0.write;
            return write
                .run_alone(&self.pool)
                .await
                .map_err(WriteError::Database);
        }
        // The writers answer every write they take; they stop only with their runtime.
        match answer.await {
            Ok(Reply::Done(answer)) => answer,
            Ok(Reply::RunAlone(write)) => write
                .run_alone(&self.pool)
                .await
                .map_err(WriteError::Database),
            Err(_) => Err(WriteError::Database(sqlx::Error::WorkerCrashed)),
        }
    }

    /// The lane of the writer of `lane` (any, for none), with the writers started (again,
    /// after the runtime that ran them ended).
    fn lane(&self, lane: Option<u64>) -> Lane {
        let mut lanes = self
            .lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if lanes.is_empty() || lanes.iter().any(|lane| lane.sender.is_closed()) {
            *lanes = self.start_writers();
        }
        let index = match lane {
            Some(lane) => lane as usize,
            None => self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        } % lanes.len();
        lanes[index].clone()
    }

    /// Starts the writers: their lanes.
    fn start_writers(&self) -> Vec<Lane> {
        // Where the dialect says so (SQLite, whose connection runs on a thread of its own;
        // PostgreSQL, measured faster so at 64 connections), each writer runs on a thread of
        // its own, so that it is never queued behind the server's tasks between two
        // statements (a busy runtime can delay a task woken by another thread for
        // milliseconds). Not a blocking task of the runtime: a store that outlives its runtime
        // must not keep the runtime's shutdown waiting. Otherwise the writer is a task.
        let runtime = tokio::runtime::Handle::current();
        let writer = |receiver, lane: &Lane| {
            let waiting = Waiting {
                receiver,
                carried: None,
                count: lane.waiting.clone(),
            };
            writer::<D>(
                self.pool.clone(),
                self.framing.clone(),
                waiting,
                lane.turn.clone(),
                self.settings,
            )
        };
        (0..self.settings.writers)
            .map(|_| {
                let (sender, receiver) = mpsc::unbounded_channel();
                let lane = Lane {
                    sender,
                    waiting: Arc::default(),
                    turn: Arc::default(),
                };
                if !D::GROUP_WRITER_THREAD {
                    runtime.spawn(writer(receiver, &lane));
                    return lane;
                }
                let task = writer(receiver, &lane);
                let runtime_of_thread = runtime.clone();
                let on_thread = std::thread::Builder::new()
                    .name("sangho-group-commit".to_owned())
                    .spawn(move || runtime_of_thread.block_on(task));
                match on_thread {
                    Ok(_) => lane,
                    Err(error) => {
                        tracing::warn!(%error, "no thread for a group commit writer: it runs as a task");
                        let (sender, receiver) = mpsc::unbounded_channel();
                        let lane = Lane { sender, ..lane };
                        runtime.spawn(writer(receiver, &lane));
                        lane
                    }
                }
            })
            .collect()
    }
}

/// How a group's transaction begins: its `BEGIN`, with whatever sets it up in the same query
/// (`None`: the database's default); and whether its writes bound their lock waits.
#[derive(Debug, Clone)]
struct Framing {
    begin: Option<Arc<str>>,
    /// A group that is one statement of many rows runs as that statement alone
    /// (`GROUP_OF_ONE_STATEMENT_COMMITS_ITSELF`).
    one_statement_commits: bool,
    /// A group of statements of many rows sends its `BEGIN` with the first and its `COMMIT`
    /// with the last (`GROUP_BEGIN_AND_COMMIT_RIDE_ALONG`).
    begin_and_commit_ride_along: bool,
    /// The group's writes wait for a row lock no longer than the dialect's bound for groups
    /// (`GROUP_LOCK_TIMEOUT`: PostgreSQL's 100 ms, MariaDB's none), and a lone write runs
    /// in the writer's turn only if its statement bounds its own wait so.
    bounded: bool,
}

/// A writer's lane: its queue, how many writes wait in it, and its turn to write.
#[derive(Clone)]
struct Lane {
    sender: mpsc::UnboundedSender<Queued>,
    /// The writes sent to the queue and not yet being written by the writer.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    /// Held by the writer while it writes a group, or by a caller that writes its lone write
    /// itself: the writes of the lane never run at once, and run in the order they came.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Lane {
    /// The lane's turn, if its writer is idle and no write waits for it.
    fn idle(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let turn = self.turn.clone().try_lock_owned().ok()?;
        // Counted before it is sent: a write sent before the turn was taken is seen here.
        let none_waits = self.waiting.load(std::sync::atomic::Ordering::SeqCst) == 0;
        none_waits.then_some(turn)
    }
}

/// The writes waiting for a writer: the queue, and a write that did not fit the last group.
struct Waiting {
    receiver: mpsc::UnboundedReceiver<Queued>,
    carried: Option<Queued>,
    /// The lane's count of writes not yet being written.
    count: Arc<std::sync::atomic::AtomicUsize>,
}

impl Waiting {
    /// Whether no write waits.
    fn is_empty(&self) -> bool {
        self.carried.is_none() && self.receiver.is_empty()
    }

    /// The next group: the first write waiting (waiting for one), then whatever else is
    /// already queued, within the bounds. `None` once the store is gone.
    async fn next_group(&mut self, settings: GroupCommit) -> Option<Vec<Queued>> {
        let first = match self.carried.take() {
            Some(first) => first,
            None => self.receiver.recv().await?,
        };
        let mut bytes = first.write.bytes();
        let mut group = vec![first];
        while group.len() < settings.max_operations {
            let Ok(next) = self.receiver.try_recv() else {
                break;
            };
            bytes = bytes.saturating_add(next.write.bytes());
            if bytes > settings.max_bytes {
                self.carried = Some(next);
                break;
            }
            group.push(next);
        }
        Some(group)
    }
}

/// One writer: takes a group at a time and commits it, until the store is gone.
async fn writer<D: Dialect>(
    pool: Pool<D::Database>,
    framing: Framing,
    mut waiting: Waiting,
    turn: Arc<tokio::sync::Mutex<()>>,
    settings: GroupCommit,
) {
    // The writer keeps its connection from one group to the next while writes wait, and
    // gives it back to the pool once none does.
    let mut connection = None;
    loop {
        let Some(group) = waiting.next_group(settings).await else {
            return;
        };
        // After a lone write its caller is writing, if any: it came first. The group's writes
        // stop counting as waiting only once the turn is the writer's, so that no caller
        // writes its own write before them.
        let _turn = turn.lock().await;
        waiting
            .count
            .fetch_sub(group.len(), std::sync::atomic::Ordering::SeqCst);
        commit::<D>(&pool, &mut connection, &framing, group).await;
        if waiting.is_empty() {
            connection = None;
        }
    }
}

/// Writes `group` in one transaction and answers each write once it is committed.
async fn commit<D: Dialect>(
    pool: &Pool<D::Database>,
    connection: &mut Option<PoolConnection<D::Database>>,
    framing: &Framing,
    mut group: Vec<Queued>,
) {
    // A caller that has gone will never read its answer: its write is not made.
    group.retain(|queued| !queued.reply.is_closed());
    // A lone write runs as it would ungrouped, in one statement: on the connection the
    // writer kept from its last group, if it kept one (on a pool of one connection, the
    // pool has no other to give). Where groups bound their lock waits, it runs as in a group
    // (its statement bounds its own), and if it fails, its caller runs it again alone: the
    // writer never waits long behind a row lock.
    if group.len() <= 1 {
        let bounded = framing.bounded;
        for queued in group {
            if !queued.write.may_run_in_turn(bounded) {
                let _ = queued.reply.send(Reply::RunAlone(queued.write));
                continue;
            }
            let written = match connection.as_mut() {
                Some(kept) => queued.write.run::<D::Database>(&mut **kept, bounded).await,
                None => queued.write.run_on_pool(pool, bounded).await,
            };
            let reply = match written {
                Ok(answer) => Reply::Done(Ok(answer)),
                Err(_) if bounded => Reply::RunAlone(queued.write),
                Err(error) => Reply::Done(Err(WriteError::Database(error))),
            };
            let _ = queued.reply.send(reply);
        }
        return;
    }
    let answer = |queued: Queued, answer| {
        let _ = queued.reply.send(Reply::Done(answer));
    };
    let written = in_one_transaction::<D>(pool, connection, framing, &group).await;
    if matches!(written, Err(Failed::Begin(_) | Failed::Commit(_))) {
        // Not kept: it may be what failed.
        *connection = None;
    }
    match written {
        Ok(answers) => {
            for (queued, answered) in group.into_iter().zip(answers) {
                answer(queued, Ok(answered));
            }
        }
        Err(Failed::Statement(error)) => {
            // Nothing of the group was written. Each caller runs its own write alone, on a
            // connection of its own: only the failing one fails again, and one that waits
            // for a lock (under the store's own lock timeout) holds up nobody else.
            tracing::debug!(%error, writes = group.len(), "a write of a group failed: each runs on its own");
            for queued in group {
                let _ = queued.reply.send(Reply::RunAlone(queued.write));
            }
        }
        Err(Failed::Begin(sqlx::Error::PoolTimedOut)) => {
            for queued in group {
                answer(queued, Err(WriteError::Database(sqlx::Error::PoolTimedOut)));
            }
        }
        Err(Failed::Begin(error) | Failed::Commit(error)) => {
            let failed = GroupCommitFailed {
                operations: group.len(),
                source: Arc::new(error),
            };
            tracing::warn!(error = %failed.source, writes = group.len(), "a group commit failed");
            for queued in group {
                answer(queued, Err(WriteError::Group(failed.clone())));
            }
        }
    }
}

/// Where a group's transaction failed.
enum Failed {
    Begin(sqlx::Error),
    Statement(sqlx::Error),
    Commit(sqlx::Error),
}

/// Runs each write of `group` in one transaction and commits it: their answers.
async fn in_one_transaction<D: Dialect>(
    pool: &Pool<D::Database>,
    connection: &mut Option<PoolConnection<D::Database>>,
    framing: &Framing,
    group: &[Queued],
) -> Result<Vec<Answer>, Failed> {
    if connection.is_none() {
        *connection = Some(pool.acquire().await.map_err(Failed::Begin)?);
    }
    let plan = Plan::of(group);
    match plan.self_answering() {
        Some([(many, indexes)]) if framing.one_statement_commits => {
            // The statement holds every write of the group, in the group's order: its
            // answers are the group's.
            let connection = connection.as_mut().expect("acquired above");
            let rows = rows_of(group, indexes);
            return many
                .write::<D>(connection, &rows)
                .await
                .map_err(Failed::Statement);
        }
        Some([_, _, ..]) if framing.begin_and_commit_ride_along => {
            let begin = framing.begin.as_deref().unwrap_or("BEGIN");
            return with_begin_and_commit_along::<D>(connection, begin, group, &plan).await;
        }
        _ => {}
    }
    let connection = connection.as_mut().expect("acquired above");
    let mut transaction = match &framing.begin {
        Some(begin) => {
            (**connection)
                .begin_with(AssertSqlSafe(begin.to_string()))
                .await
        }
        None => (**connection).begin().await,
    }
    .map_err(Failed::Begin)?;
    let mut answers: Vec<Option<Answer>> = group.iter().map(|_| None).collect();
    let nothing_along = |_| many::AlongWith::default();
    let mut ran =
        write_each_many::<D>(&mut transaction, group, &plan, nothing_along, &mut answers).await;
    if ran.is_ok() {
        for &index in &plan.one_by_one {
            match group[index]
                .write
                .run::<D::Database>(&mut transaction, true)
                .await
            {
                Ok(answer) => answers[index] = Some(answer),
                Err(error) => {
                    ran = Err(error);
                    break;
                }
            }
        }
    }
    if let Err(error) = ran {
        let _ = transaction.rollback().await;
        return Err(Failed::Statement(error));
    }
    transaction.commit().await.map_err(Failed::Commit)?;
    Ok(answers
        .into_iter()
        .map(|answer| answer.expect("every write of the group ran"))
        .collect())
}

/// Runs the statements of many rows of `plan`, each of which answers its rows by itself, in
/// one transaction whose `begin` is sent with the first of them and whose `COMMIT` with the
/// last: the group's answers, once its `COMMIT` has run.
///
/// If any of it fails (a statement, the `BEGIN` or the `COMMIT` with it), whatever is open is
/// rolled back and the group has failed as a statement does: nothing of it was acknowledged,
/// and each write runs again alone. Until the transaction ends, the connection holds one the pool
/// does not know of: if this future is dropped midway, or the rollback fails, the connection is
/// closed, never given back with it open.
async fn with_begin_and_commit_along<D: Dialect>(
    connection: &mut Option<PoolConnection<D::Database>>,
    begin: &str,
    group: &[Queued],
    plan: &Plan,
) -> Result<Vec<Answer>, Failed> {
    let mut open = OpenTransaction(connection.take());
    let held = open.0.as_mut().expect("the writer's connection");
    let mut answers: Vec<Option<Answer>> = group.iter().map(|_| None).collect();
    let along = |at: usize| many::AlongWith {
        begin: (at == 0).then_some(begin),
        commit: at + 1 == plan.many.len(),
    };
    let ran = write_each_many::<D>(held, group, plan, along, &mut answers).await;
    if let Err(error) = ran {
        let rollback: Arc<str> = "ROLLBACK".into();
        if <D::Database as Driver>::execute_in(held, &rollback, &[])
            .await
            .is_ok()
        {
            *connection = open.ended();
        }
        return Err(Failed::Statement(error));
    }
    *connection = open.ended();
    Ok(answers
        .into_iter()
        .map(|answer| answer.expect("every write of the group ran"))
        .collect())
}

/// Runs each statement of many rows of `plan` on `connection`, in order, the `at`th with
/// what rides `along(at)` with it, and puts each write's answer at its place in `answers`
/// (those of `group`); stops at the first that fails.
async fn write_each_many<'a, D: Dialect>(
    connection: &mut <D::Database as sqlx::Database>::Connection,
    group: &[Queued],
    plan: &Plan,
    along: impl Fn(usize) -> many::AlongWith<'a>,
    answers: &mut [Option<Answer>],
) -> Result<(), sqlx::Error> {
    for (at, (many, indexes)) in plan.many.iter().enumerate() {
        let rows = rows_of(group, indexes);
        let answered = many.write_along::<D>(connection, &rows, along(at)).await?;
        for (&index, answer) in indexes.iter().zip(answered) {
            answers[index] = Some(answer);
        }
    }
    Ok(())
}

/// A pooled connection inside a transaction that the pool does not know of: closed when
/// dropped, unless [`OpenTransaction::ended`] says the transaction is over.
struct OpenTransaction<DB: sqlx::Database>(Option<PoolConnection<DB>>);

impl<DB: sqlx::Database> OpenTransaction<DB> {
    /// The connection, its transaction committed or rolled back.
    fn ended(mut self) -> Option<PoolConnection<DB>> {
        self.0.take()
    }
}

impl<DB: sqlx::Database> Drop for OpenTransaction<DB> {
    fn drop(&mut self) {
        if let Some(connection) = self.0.as_mut() {
            connection.close_on_drop();
        }
    }
}

/// The rows of the writes at `indexes` of `group`, for their statement of many rows.
fn rows_of<'a>(group: &'a [Queued], indexes: &[usize]) -> Vec<many::Row<'a>> {
    indexes
        .iter()
        .map(|&index| many::Row {
            id: group[index].write.row_id().unwrap_or_default(),
            binds: group[index]
                .write
                .row
                .as_deref()
                .unwrap_or(&group[index].write.binds),
        })
        .collect()
}

/// In what order a group's writes run in its transaction: first each statement of many rows
/// with its writes, then the other writes one by one, in the order they were queued.
///
/// A write joins a statement of many rows only if no write queued before it in the group
/// touches its event (or its lane: its ordering key): the writes of one event (a completion,
/// then a claim of the same id) still run in the order they were queued, and a statement of
/// many rows never holds one event twice. Writes of distinct events were concurrent, and
/// any order of them is an order they could have run in.
struct Plan {
    many: Vec<(Arc<Many>, Vec<usize>)>,
    one_by_one: Vec<usize>,
}

impl Plan {
    fn of(group: &[Queued]) -> Self {
        let mut lanes = HashSet::new();
        let mut events = HashSet::new();
        let mut many: Vec<(Arc<Many>, Vec<usize>)> = Vec::new();
        let mut one_by_one = Vec::new();
        for (index, queued) in group.iter().enumerate() {
            let write = &queued.write;
            let first_of_lane = write.lane.is_none_or(|lane| lanes.insert(lane));
            let first_of_event =
                write.many.is_none() || write.row_id().is_some_and(|id| events.insert(id));
            match (&write.many, first_of_lane && first_of_event) {
                (Some(kind), true) => match many.iter_mut().find(|(of, _)| Arc::ptr_eq(of, kind)) {
                    Some((_, indexes)) => indexes.push(index),
                    None => many.push((kind.clone(), vec![index])),
                },
                _ => one_by_one.push(index),
            }
        }
        // A statement of one row is no gain: that write runs as its own statement, in its
        // place among the others (nothing before it in the group touched its event).
        many.retain(|(_, indexes)| match indexes.as_slice() {
            [index] => {
                one_by_one.push(*index);
                false
            }
            _ => true,
        });
        one_by_one.sort_unstable();
        Self { many, one_by_one }
    }

    /// The group's statements of many rows, where they are the whole group (nothing runs one
    /// by one) and each answers its rows by itself (nothing is read after it). A single one
    /// holds every write of the group, in order.
    fn self_answering(&self) -> Option<&[(Arc<Many>, Vec<usize>)]> {
        let answering =
            self.one_by_one.is_empty() && self.many.iter().all(|(many, _)| many.is_one_statement());
        answering.then_some(self.many.as_slice())
    }
}
