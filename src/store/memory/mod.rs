use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use foldhash::fast::RandomState;
use moka::{Expiry, sync::Cache};

use super::{
    Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal, StoreError,
};

mod key;

use key::EventKey;

/// An in-memory [`IdempotencyStore`] over a [moka] TTL cache, for tests and one-process
/// development.
///
/// Completed events live in a moka cache, each for its retention. In-flight claims live beside
/// it, each until its lease runs out, and are **never evicted** for lack of room: evicting one
/// would let a concurrent delivery run the handler a second time. There are only as many as
/// deliveries being processed at once, so they are not counted against the capacity. Every
/// change of an event's record happens under one lock, so claims are atomic: concurrent
/// deliveries of one event in one process are processed once. A duplicate is answered from the
/// cache without taking that lock.
///
/// # Not for production
///
/// - **It is emptied when the process restarts.** Every event completed before a deploy or a
///   crash is forgotten, and its redeliveries (the provider retries for up to 48 hours) are
///   processed again.
/// - **It is not shared between replicas.** Two instances behind a load balancer each have
///   their own memory, so one event delivered to both is processed twice.
/// - **It is bounded.** Past its capacity (one million completed events by default) moka
///   evicts completed events, and an evicted event is processed again if redelivered.
///
/// Use `sangho-webhook-sqlx` (PostgreSQL, SQLite, MariaDB) or `sangho-webhook-redis` in
/// production.
///
/// ```
/// use sangho_webhook::store::{Claim, ClaimToken, Claimant, IdempotencyStore, MokaStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MokaStore::new();
/// let lease = Duration::from_secs(30);
/// let (first, second) = (ClaimToken::generate(), ClaimToken::generate());
/// let claim = |token| store.claim(Claimant::new("evt_1", "payment_intent.succeeded", token), lease);
/// assert_eq!(claim(&first).await.unwrap(), Claim::Acquired);
/// assert_eq!(claim(&second).await.unwrap(), Claim::InFlight);
/// # }
/// ```
///
/// [moka]: https://docs.rs/moka
#[derive(Debug)]
pub struct MokaStore {
    // Ids are hashed with foldhash, seeded per process, instead of SipHash: they come from
    // bodies whose signature was verified, so only the provider chooses them.
    completed: Cache<EventKey, Completed, RandomState>,
    in_flight: Mutex<InFlight>,
}

/// A completed event: who completed it, and for how long it is kept. 16 bytes, kept for each
/// of up to a million events: of the token, its sequence number (the tokens this store sees
/// are all of this process, and differ only there) rather than its 32 hex digits; the
/// retention in whole nanoseconds (up to 584 years).
#[derive(Clone, Debug)]
struct Completed {
    token_sequence: u64,
    retention_nanos: u64,
}

impl Completed {
    fn new(token: &ClaimToken, retention: Duration) -> Self {
        Self {
            token_sequence: token.sequence(),
            retention_nanos: u64::try_from(retention.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    fn retention(&self) -> Duration {
        Duration::from_nanos(self.retention_nanos)
    }

    fn by(&self, token: &ClaimToken) -> bool {
        self.token_sequence == token.sequence()
    }
}

/// The in-flight claims, each until its lease runs out.
#[derive(Debug, Default)]
struct InFlight {
    claims: HashMap<EventKey, Lease, RandomState>,
    /// When `claims` grows past this, expired claims are swept out.
    sweep_at: usize,
}

#[derive(Clone, Copy, Debug)]
struct Lease {
    token: ClaimToken,
    until: Instant,
}

/// Expires every completed event after its own retention, counted from its last write.
struct RetentionExpiry;

impl Expiry<EventKey, Completed> for RetentionExpiry {
    fn expire_after_create(&self, _: &EventKey, value: &Completed, _: Instant) -> Option<Duration> {
        Some(value.retention())
    }

    fn expire_after_update(
        &self,
        _: &EventKey,
        value: &Completed,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.retention())
    }
}

/// The fewest claims at which expired ones are swept out.
const MIN_SWEEP: usize = 1024;

impl InFlight {
    /// The lease of `event_id`, if it is still running at `now`.
    fn live(&self, event_id: &EventKey, now: Instant) -> Option<&Lease> {
        self.claims.get(event_id).filter(|lease| lease.until > now)
    }

    /// Gives `event_id` to `token` for `lease` from `now`.
    fn grant(&mut self, event_id: EventKey, token: &ClaimToken, lease: Duration, now: Instant) {
        if self.claims.len() >= self.sweep_at {
            self.claims.retain(|_, lease| lease.until > now);
            self.sweep_at = (self.claims.len() * 2).max(MIN_SWEEP);
        }
        let lease = Lease {
            token: *token,
            until: now + lease,
        };
        self.claims.insert(event_id, lease);
    }
}

impl MokaStore {
    /// The default capacity, in completed events.
    pub const DEFAULT_CAPACITY: u64 = 1_000_000;

    /// A store remembering up to [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) completed
    /// events.
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// A store remembering up to `capacity` completed events; past it, moka evicts the least
    /// useful ones (and an evicted event is processed again if redelivered). In-flight claims
    /// are never evicted.
    ///
    /// ```
    /// let store = sangho_webhook::store::MokaStore::with_capacity(10_000);
    /// # let _ = store;
    /// ```
    pub fn with_capacity(capacity: u64) -> Self {
        Self {
            completed: Cache::builder()
                .max_capacity(capacity)
                .expire_after(RetentionExpiry)
                .build_with_hasher(RandomState::default()),
            in_flight: Mutex::new(InFlight {
                claims: HashMap::default(),
                sweep_at: MIN_SWEEP,
            }),
        }
    }

    /// Runs moka's pending housekeeping (expirations, evictions) now instead of on later
    /// operations: for measurements and tests.
    pub fn run_pending_tasks(&self) {
        self.completed.run_pending_tasks();
    }

    fn lock(&self) -> MutexGuard<'_, InFlight> {
        // Nothing panics while holding the lock; a poisoned lock's map is still consistent.
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MokaStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl IdempotencyStore for MokaStore {
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        let event_id = EventKey::from(claimant.event_id);
        // A completed event stays completed until it expires: no lock needed to say so.
        if self.completed.contains_key(&event_id) {
            return Ok(Claim::Completed);
        }
        let now = Instant::now();
        let mut in_flight = self.lock();
        if in_flight.live(&event_id, now).is_some() {
            return Ok(Claim::InFlight);
        }
        // Completions are written under the lock: check again now that we hold it.
        if self.completed.contains_key(&event_id) {
            return Ok(Claim::Completed);
        }
        in_flight.grant(event_id, claimant.token, lease, now);
        Ok(Claim::Acquired)
    }

    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        let (event_id, token) = (EventKey::from(claimant.event_id), claimant.token);
        let now = Instant::now();
        let mut in_flight = self.lock();
        match in_flight.claims.get_mut(&event_id) {
            Some(mine) if mine.token == *token => {
                mine.until = now + lease;
                return Ok(Renewal::Held);
            }
            Some(other) if other.until > now => return Ok(Renewal::TakenOver),
            _ => {}
        }
        if let Some(completed) = self.completed.get(&event_id) {
            return Ok(if completed.by(token) {
                Renewal::Held
            } else {
                Renewal::TakenOver
            });
        }
        in_flight.grant(event_id, token, lease, now);
        Ok(Renewal::Held)
    }

    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let (event_id, token) = (EventKey::from(claimant.event_id), claimant.token);
        let now = Instant::now();
        let mut in_flight = self.lock();
        if in_flight
            .live(&event_id, now)
            .is_some_and(|lease| lease.token != *token)
        {
            return Ok(Completion::TakenOver);
        }
        if self
            .completed
            .get(&event_id)
            .is_some_and(|completed| !completed.by(token))
        {
            return Ok(Completion::TakenOver);
        }
        self.completed
            .insert(event_id.clone(), Completed::new(token, retention));
        in_flight.claims.remove(&event_id);
        Ok(Completion::Recorded)
    }

    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        let event_id = EventKey::from(claimant.event_id);
        let now = Instant::now();
        let mut in_flight = self.lock();
        match in_flight.claims.get(&event_id) {
            Some(lease) if lease.token == *claimant.token => {
                let live = lease.until > now;
                in_flight.claims.remove(&event_id);
                Ok(if live {
                    Release::Released
                } else {
                    Release::NotHeld
                })
            }
            _ => Ok(Release::NotHeld),
        }
    }
}
