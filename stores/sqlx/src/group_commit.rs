//! Group commit: the writes that callers of one store make at the same moment (claims,
//! renewals, completions; inbox receipts, takes and their settlements) are queued and written
//! together, in one transaction that costs one disk flush, instead of one flush each.
//!
//! A writer task takes what is waiting (no timer: a lone write is written at once), up to
//! [`GroupCommit`]'s bounds, runs each write's statement in one transaction, commits, and only
//! then answers each caller: every answer comes after the commit that made its write durable,
//! and is the answer the statement gives on its own. If a statement fails, the transaction is
//! rolled back and each write of the batch runs again on its own, so that one write's failure
//! is only its own. If the commit itself fails, every caller of the batch gets that error, as
//! each would have got it from its own commit. A write whose caller has gone (its future
//! dropped, e.g. a timeout) before the batch runs is never written.

use std::{fmt, sync::Arc};

use sqlx::{AssertSqlSafe, Pool};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::{
    dialect::{Bind, Dialect, Driver, TakenRow},
    queries::statement,
};

/// How a store groups concurrent writes into one commit (see the crate's README, "Group
/// commit"). [`SqliteStore`](crate::SqliteStore) groups by default
/// ([`GroupCommit::SQLITE`]); [`GroupCommit::OFF`] writes each operation in its own commit.
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
}

impl GroupCommit {
    /// No grouping: every write is its own statement and commit.
    pub const OFF: Self = Self {
        max_operations: 1,
        max_bytes: usize::MAX,
        writers: 1,
    };

    /// SQLite's default: one writer (SQLite has one anyway), up to 64 writes or 4 MiB of
    /// bound values per commit.
    pub const SQLITE: Self = Self {
        max_operations: 64,
        max_bytes: 4 << 20,
        writers: 1,
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
    /// How many writes the failed group held.
    pub fn operations(&self) -> usize {
        self.operations
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
pub(crate) enum WriteError {
    /// The statement failed (run on its own, or the group could not start).
    Database(sqlx::Error),
    /// The group's commit failed.
    Group(GroupCommitFailed),
}

impl Write {
    /// `sql` with `binds`, answering the first column of its first row.
    pub(crate) fn text(sql: &Arc<str>, binds: &[Bind<'_>]) -> Self {
        Self {
            sql: sql.clone(),
            binds: binds.iter().copied().map(Value::of).collect(),
            answer: AnswerKind::Text,
            otherwise: None,
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
    ) -> Result<Answer, sqlx::Error> {
        let binds: Vec<Bind<'_>> = self.binds.iter().map(Value::bind).collect();
        match self.answer {
            AnswerKind::Changed => Ok(Answer::Changed(
                DB::execute_in(connection, &self.sql, &binds).await?,
            )),
            AnswerKind::Taken => Ok(Answer::Taken(
                DB::fetch_taken_in(connection, &self.sql, &binds).await?,
            )),
            AnswerKind::Text => {
                let text = DB::fetch_text_in(connection, &self.sql, &binds).await?;
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
        let mut connection = pool.acquire().await?;
        self.run::<DB>(&mut connection).await
    }
}

/// A write waiting for its group, and where its answer goes.
struct Queued {
    write: Write,
    reply: oneshot::Sender<Result<Answer, WriteError>>,
}

/// The queue of one store's writes, and its writer tasks (started on the first write).
pub(crate) struct GroupCommitter<D: Dialect> {
    pool: Pool<D::Database>,
    settings: GroupCommit,
    /// The statement that begins a group's transaction (`None`: the database's default).
    begin: Option<Arc<str>>,
    queue: std::sync::Mutex<Option<mpsc::UnboundedSender<Queued>>>,
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
            begin: D::GROUP_BEGIN.map(|begin| statement(begin).into()),
            queue: std::sync::Mutex::new(None),
        }
    }

    pub(crate) fn settings(&self) -> GroupCommit {
        self.settings
    }

    /// Writes `write`, in a group with whatever else is waiting when grouping is on: its
    /// answer, once the write is durable.
    pub(crate) async fn write(&self, write: Write) -> Result<Answer, WriteError> {
        if !self.settings.is_on() {
            return write
                .run_alone(&self.pool)
                .await
                .map_err(WriteError::Database);
        }
        let (reply, answer) = oneshot::channel();
        self.sender()
            .send(Queued { write, reply })
            .unwrap_or_else(|_| unreachable!("the writers run while the queue is open"));
        // The writers answer every write they take; they stop only with their runtime.
        answer
            .await
            .unwrap_or_else(|_| Err(WriteError::Database(sqlx::Error::WorkerCrashed)))
    }

    /// The queue, with its writers started (again, after the runtime that ran them ended).
    fn sender(&self) -> mpsc::UnboundedSender<Queued> {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sender) = queue.as_ref().filter(|sender| !sender.is_closed()) {
            return sender.clone();
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        let waiting = Arc::new(Mutex::new(Waiting {
            receiver,
            carried: None,
        }));
        // Each writer runs on a thread of its own, so that it is never queued behind the
        // server's tasks between two statements (a busy runtime can delay a task woken by a
        // connection's thread for milliseconds). Not a blocking task of the runtime: a store
        // that outlives its runtime must not keep the runtime's shutdown waiting.
        let runtime = tokio::runtime::Handle::current();
        for _ in 0..self.settings.writers {
            let task = writer::<D>(
                self.pool.clone(),
                self.begin.clone(),
                waiting.clone(),
                self.settings,
            );
            let on_thread = {
                let runtime = runtime.clone();
                std::thread::Builder::new()
                    .name("sangho-group-commit".to_owned())
                    .spawn(move || runtime.block_on(task))
            };
            if let Err(error) = on_thread {
                tracing::warn!(%error, "no thread for the group commit's writer: it runs as a task");
                runtime.spawn(writer::<D>(
                    self.pool.clone(),
                    self.begin.clone(),
                    waiting.clone(),
                    self.settings,
                ));
            }
        }
        *queue = Some(sender.clone());
        sender
    }
}

/// The writes waiting for a writer: the queue, and a write that did not fit the last group.
struct Waiting {
    receiver: mpsc::UnboundedReceiver<Queued>,
    carried: Option<Queued>,
}

impl Waiting {
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
    begin: Option<Arc<str>>,
    waiting: Arc<Mutex<Waiting>>,
    settings: GroupCommit,
) {
    loop {
        let Some(group) = waiting.lock().await.next_group(settings).await else {
            return;
        };
        commit::<D>(&pool, begin.as_ref(), group).await;
    }
}

/// Writes `group` in one transaction and answers each write once it is committed.
async fn commit<D: Dialect>(
    pool: &Pool<D::Database>,
    begin: Option<&Arc<str>>,
    mut group: Vec<Queued>,
) {
    // A caller that has gone will never read its answer: its write is not made.
    group.retain(|queued| !queued.reply.is_closed());
    if group.len() <= 1 {
        for queued in group {
            let answer = queued.write.run_alone(pool).await;
            let _ = queued.reply.send(answer.map_err(WriteError::Database));
        }
        return;
    }
    match in_one_transaction::<D>(pool, begin, &group).await {
        Ok(answers) => {
            for (queued, answer) in group.into_iter().zip(answers) {
                let _ = queued.reply.send(Ok(answer));
            }
        }
        Err(Failed::Statement(error)) => {
            tracing::debug!(%error, writes = group.len(), "a write of a group failed: each runs on its own");
            for queued in group {
                if queued.reply.is_closed() {
                    continue;
                }
                let answer = queued.write.run_alone(pool).await;
                let _ = queued.reply.send(answer.map_err(WriteError::Database));
            }
        }
        Err(Failed::Begin(sqlx::Error::PoolTimedOut)) => {
            for queued in group {
                let _ = queued
                    .reply
                    .send(Err(WriteError::Database(sqlx::Error::PoolTimedOut)));
            }
        }
        Err(Failed::Begin(error) | Failed::Commit(error)) => {
            let failed = GroupCommitFailed {
                operations: group.len(),
                source: Arc::new(error),
            };
            tracing::warn!(error = %failed.source, writes = group.len(), "a group commit failed");
            for queued in group {
                let _ = queued.reply.send(Err(WriteError::Group(failed.clone())));
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
    begin: Option<&Arc<str>>,
    group: &[Queued],
) -> Result<Vec<Answer>, Failed> {
    let mut transaction = match begin {
        Some(begin) => pool.begin_with(AssertSqlSafe(begin.to_string())).await,
        None => pool.begin().await,
    }
    .map_err(Failed::Begin)?;
    let mut answers = Vec::with_capacity(group.len());
    for queued in group {
        match queued.write.run::<D::Database>(&mut *transaction).await {
            Ok(answer) => answers.push(answer),
            Err(error) => {
                let _ = transaction.rollback().await;
                return Err(Failed::Statement(error));
            }
        }
    }
    transaction.commit().await.map_err(Failed::Commit)?;
    Ok(answers)
}
