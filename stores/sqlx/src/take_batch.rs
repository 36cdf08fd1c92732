//! Takes served together: the concurrent takes of one store's inbox workers wait in a queue,
//! and one task serves them in turns, each turn one transaction that takes up to as many due
//! events as takes wait, each event under its own worker's token.
//!
//! Where a take is several statements (MariaDB, which has no `UPDATE … RETURNING`), one take
//! of N events costs about what a take of one does: the drain of a backlog by 16 workers runs
//! a few statements per turn instead of a dozen per event. A lone take is served at once (no
//! timer), in a turn of its own.
//!
//! The takes of one turn share its lease and its order ([`TakeOrder`]); others wait for a
//! turn of their own. A turn runs one search (see `inbox_take_many.sql`): takes it left
//! without an event, when it found some, are served first by the next turn; when it found
//! none, they are answered "nothing due". A take whose caller has gone (a timeout) before its
//! turn is never served. If a turn fails, each of its takes fails with the turn's error, and
//! nothing was taken.
//!
//! [`TakeOrder`]: sangho_webhook::inbox::TakeOrder

use std::{collections::VecDeque, future::Future, pin::Pin, sync::Arc};

use tokio::sync::{mpsc, oneshot};

use crate::{GroupCommitFailed, dialect::TakenRow, group_commit::WriteError};

/// The most takes one turn serves.
const MOST_PER_TURN: usize = 32;

/// One turn: the lease (µs) and the order its takes share, and their tokens, in the order the
/// takes waited.
pub(crate) struct Turn {
    pub(crate) lease: i64,
    pub(crate) fresh_first: bool,
    pub(crate) tokens: Vec<String>,
}

/// The events a turn took: the first for the first token, and so on (fewer than the tokens
/// when fewer were due).
pub(crate) type Taken = Result<Vec<TakenRow>, sqlx::Error>;

/// What runs a turn: the dialect's take of many events, on a connection of the store's pool.
pub(crate) type Runner =
    Arc<dyn Fn(Turn) -> Pin<Box<dyn Future<Output = Taken> + Send>> + Send + Sync>;

/// A take waiting for its turn.
struct Waiting {
    lease: i64,
    fresh_first: bool,
    token: String,
    answer: oneshot::Sender<Result<Option<TakenRow>, WriteError>>,
}

/// The queue of one store's takes, and the task that serves it (started on the first take,
/// again after the runtime that ran it ended).
#[derive(Default)]
pub(crate) struct TakeQueue {
    sender: std::sync::Mutex<Option<mpsc::UnboundedSender<Waiting>>>,
}

impl std::fmt::Debug for TakeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeQueue").finish_non_exhaustive()
    }
}

impl TakeQueue {
    /// Takes the next due event under `token` for `lease` (µs), new events first or not, in a
    /// turn with whatever other takes wait: the taken event, or `None` when nothing is due.
    /// `runner` runs the turns, if the queue's task must start.
    pub(crate) async fn take(
        &self,
        token: &str,
        lease: i64,
        fresh_first: bool,
        runner: impl FnOnce() -> Runner,
    ) -> Result<Option<TakenRow>, WriteError> {
        let (answer, answered) = oneshot::channel();
        let waiting = Waiting {
            lease,
            fresh_first,
            token: token.to_owned(),
            answer,
        };
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
            sender.send(waiting)
        };
        if sent.is_err() {
            // The task ended with its runtime since this take found it running.
            return Err(WriteError::Database(sqlx::Error::WorkerCrashed));
        }
        answered
            .await
            .unwrap_or(Err(WriteError::Database(sqlx::Error::WorkerCrashed)))
    }
}

/// Serves the queue's takes in turns, until the store is gone.
async fn serve(mut queue: mpsc::UnboundedReceiver<Waiting>, runner: Runner) {
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    loop {
        if waiting.is_empty() {
            let Some(first) = queue.recv().await else {
                return;
            };
            waiting.push_back(first);
        }
        while let Ok(next) = queue.try_recv() {
            waiting.push_back(next);
        }
        // A take whose caller has gone is not served: its event would wait for a lease to
        // run out.
        waiting.retain(|take| !take.answer.is_closed());
        let Some(first) = waiting.front() else {
            continue;
        };
        let (lease, fresh_first) = (first.lease, first.fresh_first);
        let mut turn = Vec::new();
        let mut rest = VecDeque::new();
        for take in waiting.drain(..) {
            if turn.len() < MOST_PER_TURN && (take.lease, take.fresh_first) == (lease, fresh_first)
            {
                turn.push(take);
            } else {
                rest.push_back(take);
            }
        }
        waiting = rest;
        let tokens = turn.iter().map(|take| take.token.clone()).collect();
        let taken = runner(Turn {
            lease,
            fresh_first,
            tokens,
        })
        .await;
        match taken {
            Ok(rows) => {
                let found = !rows.is_empty();
                let mut rows = rows.into_iter();
                let mut unserved = Vec::new();
                for take in turn {
                    match rows.next() {
                        Some(row) => {
                            let _ = take.answer.send(Ok(Some(row)));
                        }
                        None if found => unserved.push(take),
                        None => {
                            let _ = take.answer.send(Ok(None));
                        }
                    }
                }
                // Served first by the next turn, in the order they waited.
                for take in unserved.into_iter().rev() {
                    waiting.push_front(take);
                }
            }
            Err(sqlx::Error::PoolTimedOut) => {
                for take in turn {
                    let _ = take
                        .answer
                        .send(Err(WriteError::Database(sqlx::Error::PoolTimedOut)));
                }
            }
            Err(error) if turn.len() == 1 => {
                if let Some(take) = turn.pop() {
                    let _ = take.answer.send(Err(WriteError::Database(error)));
                }
            }
            Err(error) => {
                let failed = GroupCommitFailed::new(turn.len(), error);
                for take in turn {
                    let _ = take.answer.send(Err(WriteError::Group(failed.clone())));
                }
            }
        }
    }
}
