use std::time::{Duration, Instant};

use async_trait::async_trait;
use moka::{
    Expiry,
    future::Cache,
    ops::compute::{CompResult, Op},
};

use super::{Claim, ClaimToken, IdempotencyStore, StoreError};

/// An in-memory [`IdempotencyStore`] over a [moka] cache, for tests and one-process development.
///
/// Each entry expires on its own: an in-flight claim after its lease, a completed event after
/// the retention. Claims are atomic through moka's entry API (one compute per key, never a
/// check-then-insert), so concurrent deliveries of one event in one process are processed once.
///
/// # Not for production
///
/// - **It is emptied when the process restarts.** Every event completed before a deploy or a
///   crash is forgotten, and its redeliveries (the provider retries for up to 48 hours) are
///   processed again.
/// - **It is not shared between replicas.** Two instances behind a load balancer each have
///   their own memory, so one event delivered to both is processed twice.
/// - **It is bounded.** Past its capacity (one million events by default) moka evicts entries,
///   and an evicted event is processed again if redelivered.
///
/// Use `sangho-webhook-sqlx` (PostgreSQL, SQLite) or `sangho-webhook-redis` in production.
///
/// ```
/// use sangho_webhook::store::{Claim, IdempotencyStore, MokaStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MokaStore::new();
/// let lease = Duration::from_secs(30);
/// let claim = store.claim("evt_1", "payment_intent.succeeded", lease).await.unwrap();
/// assert!(matches!(claim, Claim::Acquired(_)));
/// assert_eq!(store.claim("evt_1", "payment_intent.succeeded", lease).await.unwrap(), Claim::InFlight);
/// # }
/// ```
///
/// [moka]: https://docs.rs/moka
#[derive(Clone, Debug)]
pub struct MokaStore {
    cache: Cache<String, Record>,
}

/// What the cache keeps for one event id.
#[derive(Clone, Debug)]
struct Record {
    state: State,
    time_to_live: Duration,
}

#[derive(Clone, Debug)]
enum State {
    InFlight(ClaimToken),
    Completed,
}

/// Expires every record after its own time to live, counted from its last write.
struct RecordExpiry;

impl Expiry<String, Record> for RecordExpiry {
    fn expire_after_create(&self, _: &String, record: &Record, _: Instant) -> Option<Duration> {
        Some(record.time_to_live)
    }

    fn expire_after_update(
        &self,
        _: &String,
        record: &Record,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(record.time_to_live)
    }
}

impl MokaStore {
    /// The default capacity, in events.
    pub const DEFAULT_CAPACITY: u64 = 1_000_000;

    /// A store holding up to [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) events.
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// A store holding up to `capacity` events; past it, moka evicts the least useful entries
    /// (and an evicted event is processed again if redelivered).
    ///
    /// ```
    /// let store = sangho_webhook::store::MokaStore::with_capacity(10_000);
    /// # let _ = store;
    /// ```
    pub fn with_capacity(capacity: u64) -> Self {
        Self {
            cache: Cache::builder()
                .max_capacity(capacity)
                .expire_after(RecordExpiry)
                .build(),
        }
    }
}

impl Default for MokaStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl IdempotencyStore for MokaStore {
    async fn claim(
        &self,
        event_id: &str,
        _event_type: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let token = ClaimToken::generate();
        let fresh = Record {
            state: State::InFlight(token.clone()),
            time_to_live: lease,
        };
        let result = self
            .cache
            .entry_by_ref(event_id)
            .and_compute_with(|existing| {
                // moka hands an expired entry in as `None`: an expired lease is taken over here.
                let op = match existing {
                    Some(_) => Op::Nop,
                    None => Op::Put(fresh),
                };
                std::future::ready(op)
            })
            .await;
        match result {
            CompResult::Inserted(_) | CompResult::ReplacedWith(_) => Ok(Claim::Acquired(token)),
            CompResult::Unchanged(entry) => Ok(match entry.value().state {
                State::InFlight(_) => Claim::InFlight,
                State::Completed => Claim::Completed,
            }),
            CompResult::StillNone(_) | CompResult::Removed(_) => Err(StoreError::Protocol(
                "moka compute neither kept nor inserted the claim".to_owned(),
            )),
        }
    }

    async fn complete(
        &self,
        event_id: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let result = self
            .cache
            .entry_by_ref(event_id)
            .and_compute_with(|existing| {
                let op = match existing.map(|entry| entry.into_value().state) {
                    Some(State::InFlight(owner)) if owner == *token => Op::Put(Record {
                        state: State::Completed,
                        time_to_live: retention,
                    }),
                    _ => Op::Nop,
                };
                std::future::ready(op)
            })
            .await;
        Ok(matches!(result, CompResult::ReplacedWith(_)))
    }

    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        let result = self
            .cache
            .entry_by_ref(event_id)
            .and_compute_with(|existing| {
                let op = match existing.map(|entry| entry.into_value().state) {
                    Some(State::InFlight(owner)) if owner == *token => Op::Remove,
                    _ => Op::Nop,
                };
                std::future::ready(op)
            })
            .await;
        Ok(matches!(result, CompResult::Removed(_)))
    }
}
