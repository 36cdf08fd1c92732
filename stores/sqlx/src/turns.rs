//! Operations served together in turns: the concurrent calls of one operation on one store
//! (the inbox workers' takes, their completions) wait in a queue, and one task serves them, a
//! turn at a time, each turn one transaction for every call that waits.
//!
//! Where an operation is several statements, or one statement a flush (MariaDB, which has no
//! `UPDATE … RETURNING`), a turn of N calls costs about what one call does: 16 workers that
//! drain a backlog run a few statements per turn instead of a dozen per event. A lone call is
//! served at once (no timer), in a turn of its own.
//!
//! The calls of one turn share what [`Call::shares_turn_with`] says (a take's lease and
//! order, a completion's retention); others wait for a turn of their own. A turn answers the
//! calls in the order they waited, and may leave the last ones unanswered (a take that found
//! fewer due events than takes wait): when it answered any, those are served first by the
//! next turn; when it answered none, they are answered `None`. A call whose caller has gone (a
//! timeout) before its turn is never served. If a turn fails, each of its calls fails with the
//! turn's error, and nothing of it was written. The turns' statements are planned again as
//! the turns go on (at the 64th turn, and at every doubling after it), so that a plan settled
//! on while the table was nearly empty does not outlive it ([`crate::plans`]).
//!
//! The PostgreSQL and MariaDB dialects serve their workers' takes and completions in turns;
//! SQLite's one writer groups them in its group commit instead.
#![cfg_attr(not(any(feature = "mariadb", feature = "postgres")), allow(dead_code))]

use std::{collections::VecDeque, future::Future, pin::Pin, sync::Arc};

use tokio::sync::{mpsc, oneshot};

use crate::{
    GroupCommitFailed,
    dialect::TakenRow,
    group_commit::WriteError,
    plans::{Generations, in_generation},
};

/// The most calls one turn serves.
const MOST_PER_TURN: usize = 32;

/// How long the turns keep what they keep between them (a connection of the pool) once no
/// call waits: a worker's next call comes within a handler's run.
const KEEP_WHILE_IDLE: std::time::Duration = std::time::Duration::from_millis(100);

/// How many times a turn runs when the database aborts it on a conflict (a deadlock: it
/// wrote nothing then).
const TRIES_ON_CONFLICT: u32 = 3;

/// How many turns of one operation run at once, each on a connection of its own: while one
/// waits for the database, the next is written.
const TURNS_AT_ONCE: usize = 1;

/// One call of an operation served in turns.
pub(crate) trait Call: Send + 'static {
    /// Whether `self` may go in the turn of `first`.
    fn shares_turn_with(&self, first: &Self) -> bool;
}

/// What a turn answered: the first calls' answers, in the order they waited (`None`: the call
/// is answered `None`); the calls after them are left for the next turn.
pub(crate) type Answered<A> = Result<Vec<Option<A>>, sqlx::Error>;

/// A turn of calls, running.
pub(crate) type Running<A> = Pin<Box<dyn Future<Output = Answered<A>> + Send>>;

/// What runs the turns on the store's database.
pub(crate) struct Runner<C, A> {
    /// Runs a turn of calls.
    pub(crate) turn: Box<dyn Fn(Vec<C>) -> Running<A> + Send + Sync>,
    /// Called once no call waits and no turn runs: gives back what the turns keep between
    /// them (a connection of the pool).
    pub(crate) idle: Box<dyn Fn() + Send + Sync>,
}

/// A turn of calls, run on a connection.
pub(crate) type TurnOn<'c, A> = Pin<Box<dyn Future<Output = Answered<A>> + Send + 'c>>;

/// Runs a turn of calls `C` with the statements of their operation on a connection.
pub(crate) type TurnOf<DB, C, A> = for<'c> fn(
    &'c mut <DB as sqlx::Database>::Connection,
    &'c [Arc<str>],
    &'c [C],
) -> TurnOn<'c, A>;

/// What runs turns of calls `C`: `turn` with `statements`, again when the database aborted it
/// on a conflict (`conflict`: it wrote nothing then), on a connection of `pool` that the
/// turns keep while calls wait (no ping of the pool's before each turn), and give back once
/// none does, or after a turn failed (the connection may be what failed).
pub(crate) fn on_kept_connection<
    DB: sqlx::Database,
    C: Send + Sync + 'static,
    A: Send + 'static,
>(
    pool: sqlx::Pool<DB>,
    statements: Arc<[Arc<str>]>,
    turn: TurnOf<DB, C, A>,
    conflict: fn(&sqlx::Error) -> bool,
) -> Runner<C, A> {
    let plans = Arc::new(Plans::new(statements));
    let kept: Arc<std::sync::Mutex<Option<sqlx::pool::PoolConnection<DB>>>> = Arc::default();
    let keep = kept.clone();
    let take_kept = move |kept: &std::sync::Mutex<Option<_>>| {
        kept.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    };
    Runner {
        turn: Box::new(move |calls: Vec<C>| {
            let (pool, statements, kept) = (pool.clone(), plans.next_turn(), kept.clone());
            Box::pin(async move {
                let mut connection = match take_kept(&kept) {
                    Some(connection) => connection,
                    None => pool.acquire().await?,
                };
                let mut tries = 0;
                let answered = loop {
                    tries += 1;
                    match turn(&mut connection, &statements, &calls).await {
                        Err(error) if conflict(&error) && tries < TRIES_ON_CONFLICT => continue,
                        answered => break answered,
                    }
                };
                if answered.is_ok() {
                    *kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
                        Some(connection);
                }
                answered
            })
        }),
        idle: Box::new(move || drop(take_kept(&keep))),
    }
}

/// The statements of an operation's turns, planned again as the turns go on
/// ([`crate::plans`]).
#[derive(Debug)]
struct Plans {
    statements: Arc<[Arc<str>]>,
    generations: Generations,
    current: std::sync::Mutex<(u32, Arc<[Arc<str>]>)>,
}

impl Plans {
    fn new(statements: Arc<[Arc<str>]>) -> Self {
        Self {
            current: std::sync::Mutex::new((0, statements.clone())),
            statements,
            generations: Generations::default(),
        }
    }

    /// The statements of the next turn.
    fn next_turn(&self) -> Arc<[Arc<str>]> {
        let generation = self.generations.next_run();
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.0 != generation {
            let renewed = self
                .statements
                .iter()
                .map(|statement| Arc::from(in_generation(statement, generation)))
                .collect();
            *current = (generation, renewed);
        }
        current.1.clone()
    }
}

/// A call waiting for its turn.
struct Waiting<C, A> {
    call: C,
    answer: oneshot::Sender<Result<Option<A>, WriteError>>,
}

/// The queue of one operation's calls on one store, and the task that serves it (started by
/// the first call, again after the runtime that ran it ended).
pub(crate) struct Turns<C, A> {
    sender: std::sync::Mutex<Option<mpsc::UnboundedSender<Waiting<C, A>>>>,
}

impl<C, A> Default for Turns<C, A> {
    fn default() -> Self {
        Self {
            sender: std::sync::Mutex::new(None),
        }
    }
}

impl<C, A> std::fmt::Debug for Turns<C, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turns").finish_non_exhaustive()
    }
}

impl<C: Call + Clone, A: Send + 'static> Turns<C, A> {
    /// Makes `call` in a turn with whatever other calls wait: its answer. `runner` runs the
    /// turns, if the queue's task must start.
    pub(crate) async fn call(
        &self,
        call: C,
        runner: impl FnOnce() -> Runner<C, A>,
    ) -> Result<Option<A>, WriteError> {
        let (answer, answered) = oneshot::channel();
        let sent = {
            let mut sender = self
                .sender
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let live = sender.as_ref().filter(|sender| !sender.is_closed());
            let sender = match live {
                Some(sender) => sender.clone(),
                None => {
                    let (queue, waiting) = mpsc::unbounded_channel();
                    tokio::spawn(serve(waiting, runner()));
                    sender.insert(queue).clone()
                }
            };
            sender.send(Waiting { call, answer })
        };
        if sent.is_err() {
            // The task ended with its runtime since this call found it running.
            return Err(WriteError::Database(sqlx::Error::WorkerCrashed));
        }
        answered
            .await
            .unwrap_or(Err(WriteError::Database(sqlx::Error::WorkerCrashed)))
    }
}

/// Serves the queue's calls in turns, [`TURNS_AT_ONCE`] at most at once, until the store is
/// gone.
async fn serve<C: Call + Clone, A: Send + 'static>(
    mut queue: mpsc::UnboundedReceiver<Waiting<C, A>>,
    runner: Runner<C, A>,
) {
    let mut queued: VecDeque<Waiting<C, A>> = VecDeque::new();
    let mut running = tokio::task::JoinSet::new();
    let mut open = true;
    // Whether the turns keep something (a connection) since they last went idle.
    let mut keeping = false;
    loop {
        while running.len() < TURNS_AT_ONCE {
            while let Ok(next) = queue.try_recv() {
                queued.push_back(next);
            }
            let Some(turn) = next_turn(&mut queued) else {
                break;
            };
            let calls = turn.iter().map(|waiting| waiting.call.clone()).collect();
            let answered = (runner.turn)(calls);
            running.spawn(async move { (turn, answered.await) });
            keeping = true;
        }
        if !open && running.is_empty() && queued.is_empty() {
            return;
        }
        tokio::select! {
            next = queue.recv(), if open => match next {
                Some(next) => queued.push_back(next),
                None => open = false,
            },
            Some(done) = running.join_next(), if !running.is_empty() => {
                // A turn that panicked dropped its calls' answers: each caller gets an error.
                if let Ok((turn, answered)) = done {
                    answer(turn, answered, &mut queued);
                }
            }
            () = tokio::time::sleep(KEEP_WHILE_IDLE),
                if keeping && running.is_empty() && queued.is_empty() => {
                (runner.idle)();
                keeping = false;
            }
        }
    }
}

/// The next turn: the first waiting call whose caller has not gone, and those after it that
/// share its turn, up to [`MOST_PER_TURN`]; `None` when no call waits.
fn next_turn<C: Call + Clone, A>(
    queued: &mut VecDeque<Waiting<C, A>>,
) -> Option<Vec<Waiting<C, A>>> {
    // A call whose caller has gone is not served.
    queued.retain(|waiting| !waiting.answer.is_closed());
    let first = queued.front()?.call.clone();
    let mut turn = Vec::new();
    let mut rest = VecDeque::new();
    for next in queued.drain(..) {
        if turn.len() < MOST_PER_TURN && next.call.shares_turn_with(&first) {
            turn.push(next);
        } else {
            rest.push_back(next);
        }
    }
    *queued = rest;
    Some(turn)
}

/// Answers the calls of `turn` as the turn `answered`; those it left unanswered, when it
/// answered any, go back to the front of `queued`.
fn answer<C, A>(
    turn: Vec<Waiting<C, A>>,
    answered: Answered<A>,
    queued: &mut VecDeque<Waiting<C, A>>,
) {
    let answers = match answered {
        Ok(answers) => answers,
        Err(error) => return fail(turn, error),
    };
    let any = answers.iter().any(Option::is_some);
    let mut answers = answers.into_iter();
    let mut unserved = Vec::new();
    for waiting in turn {
        match answers.next() {
            Some(answer) => {
                let _ = waiting.answer.send(Ok(answer));
            }
            None if any => unserved.push(waiting),
            None => {
                let _ = waiting.answer.send(Ok(None));
            }
        }
    }
    // Served first by the next turn, in the order they waited.
    for waiting in unserved.into_iter().rev() {
        queued.push_front(waiting);
    }
}

/// Fails each call of `turn` with the turn's `error`.
fn fail<C, A>(mut turn: Vec<Waiting<C, A>>, error: sqlx::Error) {
    match error {
        sqlx::Error::PoolTimedOut => {
            for waiting in turn {
                let timed_out = WriteError::Database(sqlx::Error::PoolTimedOut);
                let _ = waiting.answer.send(Err(timed_out));
            }
        }
        error if turn.len() == 1 => {
            if let Some(waiting) = turn.pop() {
                let _ = waiting.answer.send(Err(WriteError::Database(error)));
            }
        }
        error => {
            let failed = GroupCommitFailed::new(turn.len(), error);
            for waiting in turn {
                let _ = waiting.answer.send(Err(WriteError::Group(failed.clone())));
            }
        }
    }
}

/// Inbox mode's operations served in turns, where the dialect serves them so (PostgreSQL,
/// MariaDB).
#[derive(Debug, Default)]
pub(crate) struct InboxTurns {
    /// The workers' takes: a turn takes an event for each, under its own token.
    pub(crate) takes: Turns<Take, TakenRow>,
    /// The workers' completions: a turn completes each event its token holds.
    pub(crate) completions: Turns<Completion, ()>,
}

/// A worker's take: its token, its lease in µs and whether new events go first.
#[derive(Debug, Clone)]
pub(crate) struct Take {
    pub(crate) token: String,
    pub(crate) lease: i64,
    pub(crate) fresh_first: bool,
}

impl Take {
    /// A take of a worker, from the `binds` of its operation: its token, its lease and its
    /// order (1: new events first).
    pub(crate) fn of(binds: &[crate::dialect::Bind<'_>]) -> Self {
        use crate::dialect::Bind;
        let [Bind::Text(token), Bind::Int(lease), Bind::Int(fresh_first)] = binds else {
            unreachable!("a take binds its token, its lease and its order")
        };
        Self {
            token: (*token).to_owned(),
            lease: *lease,
            fresh_first: *fresh_first == 1,
        }
    }
}

impl Call for Take {
    fn shares_turn_with(&self, first: &Self) -> bool {
        (self.lease, self.fresh_first) == (first.lease, first.fresh_first)
    }
}

/// A worker's completion: the event, its token and the retention in µs.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    pub(crate) event_id: String,
    pub(crate) token: String,
    pub(crate) retention: i64,
}

impl Completion {
    /// A completion of a worker, from the `binds` of its operation: the event id, its token
    /// and the retention.
    pub(crate) fn of(binds: &[crate::dialect::Bind<'_>]) -> Self {
        use crate::dialect::Bind;
        let [
            Bind::Text(event_id),
            Bind::Text(token),
            Bind::Int(retention),
        ] = binds
        else {
            unreachable!("a completion binds its event id, its token and the retention")
        };
        Self {
            event_id: (*event_id).to_owned(),
            token: (*token).to_owned(),
            retention: *retention,
        }
    }
}

impl Call for Completion {
    fn shares_turn_with(&self, first: &Self) -> bool {
        self.retention == first.retention
    }
}
