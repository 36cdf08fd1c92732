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
//! A call that waits for its turn may be lent out ([`Turns::lend`]): MariaDB's receipt of a
//! new event lends a worker's waiting take, and writes the event already taken under that
//! take's token and lease, so that no turn has to find it. A call is lent only while the turns
//! keep up: after a turn that had no answer for some of its calls (a turn of takes that found
//! fewer due events than takes), any number; after a turn that had one for each of its calls
//! (more may wait in the table), at most as many as that turn answered, so that the turns, in
//! their order, keep at least half of the calls.
//!
//! The PostgreSQL and MariaDB dialects serve their workers' takes and completions in turns;
//! SQLite's one writer groups them in its group commit instead.
#![cfg_attr(not(any(feature = "mariadb", feature = "postgres")), allow(dead_code))]

use std::{
    collections::VecDeque,
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

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

/// What the task that serves a queue is sent.
enum Message<C, A> {
    /// A call, to serve in a turn.
    Call(Waiting<C, A>),
    /// A call that was lent out and given back unanswered: served first.
    GivenBack(Waiting<C, A>),
    /// A request for a waiting call to lend ([`Turns::lend`]).
    Lend(oneshot::Sender<Option<Waiting<C, A>>>),
}

/// A waiting call lent out by [`Turns::lend`]: answered by its borrower, or, dropped
/// unanswered, given back to wait for its turn again, first in the queue.
pub(crate) struct Lent<C, A> {
    waiting: Option<Waiting<C, A>>,
    back: mpsc::UnboundedSender<Message<C, A>>,
}

impl<C, A> Lent<C, A> {
    /// The call.
    pub(crate) fn call(&self) -> &C {
        &self.waiting.as_ref().expect("answered once, by value").call
    }

    /// Answers the call with `answer`; `Err(answer)` when its caller has gone.
    pub(crate) fn answer(mut self, answer: A) -> Result<(), A> {
        let waiting = self.waiting.take().expect("answered once, by value");
        waiting
            .answer
            .send(Ok(Some(answer)))
            .map_err(|unsent| match unsent {
                Ok(Some(answer)) => answer,
                _ => unreachable!("the answer sent"),
            })
    }
}

impl<C, A> Drop for Lent<C, A> {
    fn drop(&mut self) {
        if let Some(waiting) = self.waiting.take() {
            // If the task has ended, the call's caller gets the error of a call it dropped.
            let _ = self.back.send(Message::GivenBack(waiting));
        }
    }
}

/// The queue of one operation's calls on one store, and the task that serves it (started by
/// the first call, again after the runtime that ran it ended).
pub(crate) struct Turns<C, A> {
    sender: std::sync::Mutex<Option<mpsc::UnboundedSender<Message<C, A>>>>,
    /// How many waiting calls the queue's task would lend, as it last counted them: a
    /// request to lend is sent to it only when that is not 0 (a hint, which the task checks
    /// again).
    lendable: Arc<AtomicUsize>,
}

impl<C, A> Default for Turns<C, A> {
    fn default() -> Self {
        Self {
            sender: std::sync::Mutex::new(None),
            lendable: Arc::default(),
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
                    tokio::spawn(serve(waiting, runner(), self.lendable.clone()));
                    sender.insert(queue).clone()
                }
            };
            sender.send(Message::Call(Waiting { call, answer }))
        };
        if sent.is_err() {
            // The task ended with its runtime since this call found it running.
            return Err(WriteError::Database(sqlx::Error::WorkerCrashed));
        }
        answered
            .await
            .unwrap_or(Err(WriteError::Database(sqlx::Error::WorkerCrashed)))
    }

    /// A call that waits for its turn, lent out to be answered another way, while the turns
    /// keep up (see the module's documentation); `None` when none waits, or none may be lent.
    /// Where the queue's task last counted none to lend, answers `None` without asking it.
    pub(crate) async fn lend(&self) -> Option<Lent<C, A>> {
        if self.lendable.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let back = self
            .sender
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .filter(|sender| !sender.is_closed())?
            .clone();
        let (ask, lent) = oneshot::channel();
        back.send(Message::Lend(ask)).ok()?;
        let waiting = lent.await.ok()??;
        Some(Lent {
            waiting: Some(waiting),
            back,
        })
    }
}

/// Serves the queue's calls in turns, [`TURNS_AT_ONCE`] at most at once, until the store is
/// gone; keeps `lendable_now` at how many waiting calls it would lend.
async fn serve<C: Call + Clone, A: Send + 'static>(
    mut queue: mpsc::UnboundedReceiver<Message<C, A>>,
    runner: Runner<C, A>,
    lendable_now: Arc<AtomicUsize>,
) {
    let mut queued: VecDeque<Waiting<C, A>> = VecDeque::new();
    let mut running = tokio::task::JoinSet::new();
    let mut open = true;
    // Whether the turns keep something (a connection) since they last went idle.
    let mut keeping = false;
    // How many waiting calls may be lent out before the next turn is answered.
    let mut lendable = 0;
    loop {
        while running.len() < TURNS_AT_ONCE {
            while let Ok(next) = queue.try_recv() {
                receive(next, &mut queued, &mut lendable);
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
            lendable_now.store(0, Ordering::Relaxed);
            return;
        }
        lendable_now.store(lendable.min(queued.len()), Ordering::Relaxed);
        tokio::select! {
            next = queue.recv(), if open => match next {
                Some(next) => receive(next, &mut queued, &mut lendable),
                None => open = false,
            },
            Some(done) = running.join_next(), if !running.is_empty() => {
                // A turn that panicked dropped its calls' answers: each caller gets an error.
                if let Ok((turn, answered)) = done {
                    lendable = lendable_after(&turn, &answered);
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

/// Takes in what the queue's task was sent: a call waits at the back of `queued`, one given
/// back at the front; a request to lend gets the last waiting call, if `lendable` allows.
fn receive<C, A>(
    message: Message<C, A>,
    queued: &mut VecDeque<Waiting<C, A>>,
    lendable: &mut usize,
) {
    match message {
        Message::Call(waiting) => queued.push_back(waiting),
        Message::GivenBack(waiting) => queued.push_front(waiting),
        Message::Lend(ask) => {
            // A call whose caller has gone is not lent.
            queued.retain(|waiting| !waiting.answer.is_closed());
            let lent = match *lendable {
                0 => None,
                _ => queued.pop_back(),
            };
            let lent_one = lent.is_some();
            match ask.send(lent) {
                Ok(()) if lent_one => *lendable -= 1,
                Ok(()) => {}
                // The borrower has gone: the call waits again where it was.
                Err(lent) => queued.extend(lent),
            }
        }
    }
}

/// How many waiting calls may be lent out after `turn` was `answered`: any number when it had
/// no answer for some of its calls (nothing more to hand out), none when it failed, and
/// otherwise as many as it answered.
fn lendable_after<C, A>(turn: &[Waiting<C, A>], answered: &Answered<A>) -> usize {
    match answered {
        Ok(answers) => {
            let served = answers.iter().filter(|answer| answer.is_some()).count();
            if served < turn.len() {
                usize::MAX
            } else {
                served
            }
        }
        Err(_) => 0,
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

/// A worker's take lent out to the receipt of a new event ([`Turns::lend`]).
pub(crate) type LentTake = Lent<Take, TakenRow>;

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::{Mutex, mpsc};

    use super::{Answered, Call, Runner, Turns};

    /// A call of the tests: any two share a turn.
    #[derive(Debug, Clone)]
    struct Ask(&'static str);

    impl Call for Ask {
        fn shares_turn_with(&self, _first: &Self) -> bool {
            true
        }
    }

    /// What the next turns answer, each turn the next list sent.
    type Script = mpsc::UnboundedSender<Vec<Option<u32>>>;

    /// What starts the runner of the turns, if the queue's task must start.
    type MakeRunner = Arc<dyn Fn() -> Runner<Ask, u32> + Send + Sync>;

    /// Turns whose each turn answers what the test sends next, when it sends it.
    fn scripted() -> (Arc<Turns<Ask, u32>>, Script, MakeRunner) {
        let (script, answers) = mpsc::unbounded_channel::<Vec<Option<u32>>>();
        let answers = Arc::new(Mutex::new(answers));
        let runner: MakeRunner = Arc::new(move || {
            let answers = answers.clone();
            Runner {
                turn: Box::new(move |_calls| {
                    let answers = answers.clone();
                    Box::pin(async move {
                        let answered: Answered<u32> =
                            Ok(answers.lock().await.recv().await.unwrap_or_default());
                        answered
                    })
                }),
                idle: Box::new(|| {}),
            }
        });
        (Arc::new(Turns::default()), script, runner)
    }

    /// Makes `ask` on `turns` in a task of its own: its answer, once it has one.
    fn call(
        turns: &Arc<Turns<Ask, u32>>,
        runner: &MakeRunner,
        ask: &'static str,
    ) -> tokio::task::JoinHandle<Option<u32>> {
        let (turns, runner) = (turns.clone(), runner.clone());
        tokio::spawn(async move {
            turns
                .call(Ask(ask), move || runner())
                .await
                .expect("answered")
        })
    }

    /// Lets the queue's task take in what it was sent.
    async fn settle() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    /// A first call, whose turn finds nothing for it: the turns keep up.
    async fn a_turn_that_finds_nothing(
        turns: &Arc<Turns<Ask, u32>>,
        script: &Script,
        runner: &MakeRunner,
    ) {
        let first = call(turns, runner, "first");
        settle().await;
        script.send(vec![None]).expect("the first turn");
        assert_eq!(first.await.expect("first"), None);
    }

    #[tokio::test]
    async fn a_waiting_call_is_lent_only_while_the_turns_keep_up() {
        let (turns, script, runner) = scripted();
        let first = call(&turns, &runner, "first");
        settle().await;
        let waits = call(&turns, &runner, "waits");
        settle().await;
        assert!(
            turns.lend().await.is_none(),
            "a call was lent before any turn was answered"
        );

        // The first turn finds nothing for its one call: the turns keep up.
        script.send(vec![None]).expect("the first turn");
        assert_eq!(first.await.expect("first"), None);
        settle().await;
        // "waits" is in the second turn now; two more wait behind it.
        let (third, fourth) = (
            call(&turns, &runner, "third"),
            call(&turns, &runner, "fourth"),
        );
        settle().await;
        let lent = turns
            .lend()
            .await
            .expect("a call lent while the turns keep up");
        assert_eq!(lent.call().0, "fourth", "the last call to wait is lent");
        assert!(lent.answer(7).is_ok());
        assert_eq!(
            fourth.await.expect("fourth"),
            Some(7),
            "answered by its borrower"
        );
        let lent = turns
            .lend()
            .await
            .expect("any number lent while the turns keep up");
        assert_eq!(lent.call().0, "third");
        drop(lent);

        // The second turn answers each of its calls: more may wait in the table, so at most
        // one call (as many as it answered) is lent before the next turn is answered.
        script.send(vec![Some(1)]).expect("the second turn");
        assert_eq!(waits.await.expect("waits"), Some(1));
        settle().await;
        // "third", given back, is in the third turn; two more wait behind it.
        let (fifth, sixth) = (
            call(&turns, &runner, "fifth"),
            call(&turns, &runner, "sixth"),
        );
        settle().await;
        let lent = turns.lend().await.expect("one call lent after a full turn");
        assert_eq!(lent.call().0, "sixth");
        assert!(lent.answer(6).is_ok());
        assert!(
            turns.lend().await.is_none(),
            "more calls lent than the last turn answered"
        );
        script.send(vec![Some(3)]).expect("the third turn");
        assert_eq!(
            third.await.expect("third"),
            Some(3),
            "a call given back is served"
        );
        script.send(vec![Some(5)]).expect("the fourth turn");
        assert_eq!(fifth.await.expect("fifth"), Some(5));
        assert_eq!(sixth.await.expect("sixth"), Some(6));
    }

    #[tokio::test]
    async fn a_request_to_lend_with_no_call_waiting_asks_nothing_of_the_queue_s_task() {
        let (turns, script, runner) = scripted();
        a_turn_that_finds_nothing(&turns, &script, &runner).await;
        settle().await;
        // The turns keep up, and no call waits: the request is answered at once, without
        // waiting for the queue's task (which this one-thread runtime does not run meanwhile).
        let mut lend = std::pin::pin!(turns.lend());
        let polled = lend
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert!(
            matches!(polled, std::task::Poll::Ready(None)),
            "the request waited for the queue's task"
        );
        // A call that waits is lent, as before.
        let second = call(&turns, &runner, "second");
        settle().await;
        let waits = call(&turns, &runner, "waits");
        settle().await;
        let lent = turns.lend().await.expect("a waiting call lent");
        assert_eq!(lent.call().0, "waits");
        assert!(lent.answer(2).is_ok());
        assert_eq!(waits.await.expect("waits"), Some(2));
        script.send(vec![Some(1)]).expect("the second turn");
        assert_eq!(second.await.expect("second"), Some(1));
    }

    #[tokio::test]
    async fn a_call_whose_caller_has_gone_is_never_lent() {
        let (turns, script, runner) = scripted();
        a_turn_that_finds_nothing(&turns, &script, &runner).await;
        let second = call(&turns, &runner, "second");
        settle().await;
        let waits = call(&turns, &runner, "waits");
        let gone = call(&turns, &runner, "gone");
        settle().await;
        gone.abort();
        settle().await;
        let lent = turns.lend().await.expect("a call lent");
        assert_eq!(
            lent.call().0,
            "waits",
            "the call whose caller left was lent"
        );
        assert!(lent.answer(2).is_ok());
        assert_eq!(waits.await.expect("waits"), Some(2));
        script.send(vec![Some(1)]).expect("the second turn");
        assert_eq!(second.await.expect("second"), Some(1));
    }
}
