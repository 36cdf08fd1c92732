//! The numbers an operator alerts on: what a worker did ([`WorkerMetrics`]), and the inbox's
//! unfinished and dead events, read at most every few seconds ([`CachedGauges`]).
//!
//! Once the receiver answers 2xx the provider's dashboard no longer shows a failing handler:
//! these numbers do. Alert on the age of the oldest waiting event (no worker runs, or workers
//! cannot keep up), on dead events, and on the rate of failed attempts.
//!
//! The counters are per worker process (a Prometheus server sums them over the processes).
//! Replays are counted by whoever replays: the `sangho inbox replay` command prints and logs
//! each, and a program that calls [`Inbox::replay`] counts its own. The gauges are per database
//! and the same from every process.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

use super::{Inbox, InboxGauges};
use crate::store::StoreError;

/// How an attempt at an event ended, as [`WorkerMetrics::attempts`] counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The handler answered 2xx, and the event is completed.
    Completed,
    /// The handler answered anything else, failed or panicked: the event is due again later,
    /// or dead.
    Failed,
    /// The worker shut down before the handler answered: the event is due again at once.
    Abandoned,
    /// The attempt's lease was lost (another worker took the event over) before it was settled.
    LeaseLost,
}

impl AttemptOutcome {
    /// Every outcome.
    pub const ALL: [AttemptOutcome; 4] = [
        AttemptOutcome::Completed,
        AttemptOutcome::Failed,
        AttemptOutcome::Abandoned,
        AttemptOutcome::LeaseLost,
    ];

    /// The outcome's name, as a metric label: `completed`, `failed`, `abandoned`, `lease_lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
            Self::LeaseLost => "lease_lost",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What one [`InboxWorker`](super::InboxWorker) has done since it was built: attempts by
/// outcome, events it made dead, and when it last took an event. Cheap to clone: every clone
/// reads the same counters.
///
/// ```
/// use sangho_webhook::inbox::{AttemptOutcome, InboxWorker, MemoryInbox};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let handlers = tower::service_fn(|_request: http::Request<sangho_webhook::WebhookBody>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// });
/// let worker = InboxWorker::builder(MemoryInbox::new(), handlers).build()?;
/// let metrics = worker.metrics();
/// assert_eq!(metrics.attempts(AttemptOutcome::Failed), 0);
/// assert_eq!(metrics.dead_lettered(), 0);
/// assert_eq!(metrics.since_last_take(), None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct WorkerMetrics {
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    attempts: [AtomicU64; 4],
    dead: AtomicU64,
    last_take: Mutex<Option<Instant>>,
}

impl WorkerMetrics {
    /// The attempts that ended with `outcome`.
    pub fn attempts(&self, outcome: AttemptOutcome) -> u64 {
        self.counters.attempts[outcome.index()].load(Ordering::Relaxed)
    }

    /// The events this worker made dead (each also counted as a failed attempt).
    pub fn dead_lettered(&self) -> u64 {
        self.counters.dead.load(Ordering::Relaxed)
    }

    /// How long ago this worker last took an event, or `None` before its first.
    pub fn since_last_take(&self) -> Option<Duration> {
        let last = *self
            .counters
            .last_take
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        last.map(|at| at.elapsed())
    }

    pub(super) fn took(&self) {
        *self
            .counters
            .last_take
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Instant::now());
    }

    pub(super) fn attempt(&self, outcome: AttemptOutcome) {
        self.counters.attempts[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn dead(&self) {
        self.counters.dead.fetch_add(1, Ordering::Relaxed);
    }
}

/// An inbox's [`gauges`](Inbox::gauges), read from the store at most once per `max_age`: what
/// a metrics endpoint and a health check scrape, however often they are scraped.
///
/// ```
/// use sangho_webhook::inbox::{CachedGauges, MemoryInbox};
/// use std::{sync::Arc, time::Duration};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let gauges = CachedGauges::new(Arc::new(MemoryInbox::new()), Duration::from_secs(5));
/// assert_eq!(gauges.get().await.unwrap().received, 0);
/// # }
/// ```
#[derive(Clone)]
pub struct CachedGauges {
    inbox: Arc<dyn Inbox>,
    max_age: Duration,
    last: Arc<tokio::sync::Mutex<Option<(Instant, InboxGauges)>>>,
}

impl CachedGauges {
    /// The gauges of `inbox`, read again once they are older than `max_age`.
    pub fn new(inbox: Arc<dyn Inbox>, max_age: Duration) -> Self {
        Self {
            inbox,
            max_age,
            last: Arc::default(),
        }
    }

    /// The same gauges, read again once they are older than `max_age`.
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// The gauges, at most `max_age` old. Concurrent callers share one read.
    ///
    /// # Errors
    ///
    /// The store's error, when the gauges are stale and the store failed to answer.
    pub async fn get(&self) -> Result<InboxGauges, StoreError> {
        let mut last = self.last.lock().await;
        if let Some((read_at, gauges)) = *last
            && read_at.elapsed() < self.max_age
        {
            return Ok(gauges);
        }
        let gauges = self.inbox.gauges().await?;
        *last = Some((Instant::now(), gauges));
        Ok(gauges)
    }
}

impl std::fmt::Debug for CachedGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedGauges")
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}
