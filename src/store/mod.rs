//! The idempotency store: where the layer remembers which events it has processed.
//!
//! For every delivery of a verified event the layer draws a fresh [`ClaimToken`] and talks to
//! the store through four operations, and only these. Each takes a [`Claimant`] (the event's
//! id and type, and the delivery's token), the lease or retention where one applies, and
//! answers an enum named for what the store found:
//!
//! | operation | when | what the store does |
//! | --- | --- | --- |
//! | [`claim`](IdempotencyStore::claim) | a verified event arrives | atomically: if the id is unknown, or its record has expired (a lease or a retention that ran out), record an in-flight claim owned by the token and answer [`Claim::Acquired`]; otherwise answer [`Claim::Completed`] or [`Claim::InFlight`] |
//! | [`renew`](IdempotencyStore::renew) | every third of the lease while the handler runs | extend the token's claim by a new lease: [`Renewal`] |
//! | [`complete`](IdempotencyStore::complete) | the handler answered 2xx | record the event as completed for the retention, unless another owner holds or completed it: [`Completion`] |
//! | [`release`](IdempotencyStore::release) | the handler failed, panicked or was cancelled, or the claim's answer came too late | forget the token's in-flight claim, so that the next delivery processes the event: [`Release`] |
//!
//! # The rules
//!
//! A record is *live* while its lease (in flight) or retention (completed) runs. A record that
//! is not live is treated exactly like no record at all, by every operation. Another owner
//! *holds* an event when it has a live in-flight claim on it.
//!
//! 1. **claim** is atomic: among any number of concurrent claims of one id, at most one is
//!    acquired. It acquires when the id has no live record.
//! 2. **renew**: when the token holds the live claim, the lease is extended to `lease` from
//!    now; when there is no live record, the token's claim is recorded again for `lease` (its
//!    record ran out or was lost, and nobody took the event over); both answer
//!    [`Renewal::Held`]. When the token completed the event, [`Renewal::Held`] and nothing
//!    changes. When another owner holds or completed the event, [`Renewal::TakenOver`] and
//!    nothing changes.
//! 3. **complete**: unless another owner holds the event or completed it, the event is
//!    recorded as completed by the token for `retention` from now, and the answer is
//!    [`Completion::Recorded`]. So a completion succeeds even when the token's own record
//!    expired, was evicted or was lost by the backend, and a repeated completion by the same
//!    token succeeds. Otherwise [`Completion::TakenOver`], and nothing changes.
//! 4. **release**: when the token holds the live claim, the record is removed and the answer
//!    is [`Release::Released`]; otherwise [`Release::NotHeld`], and nothing changes. A
//!    completed event stays completed.
//!
//! A claim whose owner never comes back (the process crashed) expires with its lease, and the
//! next delivery takes it over. The layer calls each operation under a timeout; a claim that
//! answers too late, or whose caller went away, is released in the background with its token,
//! so that no orphan claim blocks the event for a whole lease.
//!
//! The crate ships [`MokaStore`] (in memory, for tests and one-process development).
//! Production stores live in their own crates: `sangho-webhook-sqlx` (PostgreSQL, SQLite,
//! MariaDB) and `sangho-webhook-redis` (Redis and Redis Cluster). Any other store can be written
//! against this trait (this module re-exports [`async_trait`](macro@async_trait)) and checked against every rule
//! above with the conformance suite in `testing` (feature `test-util`).

mod answer;
mod claimant;
mod memory;
mod token;

pub use answer::{Claim, Completion, Release, Renewal};
pub use async_trait::async_trait;
pub use claimant::Claimant;
pub use memory::MokaStore;
pub use token::ClaimToken;

use std::{error::Error as StdError, sync::Arc, time::Duration};

/// A store operation failed: the layer answers `503 Service Unavailable` and the provider
/// retries later.
///
/// The cause is kept as [`source`](std::error::Error::source), never flattened into a string.
///
/// ```
/// use sangho_webhook::store::StoreError;
/// use std::error::Error;
///
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
/// let error = StoreError::backend(io);
/// assert!(error.source().is_some());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend (database, cache, network) reported an error.
    #[error("idempotency store backend error")]
    Backend(#[source] Box<dyn StdError + Send + Sync + 'static>),
    /// The operation did not finish within the configured time.
    #[error("idempotency store did not answer within {0:?}")]
    Timeout(Duration),
    /// The backend answered something the store cannot interpret.
    #[error("idempotency store returned an unexpected answer: {0}")]
    Protocol(String),
}

impl StoreError {
    /// Wraps a backend error, keeping it as the source.
    pub fn backend(error: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Self::Backend(error.into())
    }
}

/// Where the layer records claims and completions. Object-safe: `Arc<dyn IdempotencyStore>`
/// works.
///
/// Implementations follow the [rules of the module docs](self#the-rules); the conformance
/// suite in `testing` (feature `test-util`) checks each of them, including concurrent claims
/// and a model-based property test.
///
/// # A complete custom store
///
/// A store over a mutex-guarded map (for illustration; [`MokaStore`] is the in-memory store to
/// use):
///
/// ```
/// use std::{collections::HashMap, sync::Mutex, time::{Duration, Instant}};
/// use sangho_webhook::store::{
///     Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal, StoreError,
///     async_trait,
/// };
///
/// struct Record { token: ClaimToken, completed: bool, until: Instant }
///
/// #[derive(Default)]
/// struct MapStore(Mutex<HashMap<String, Record>>);
///
/// impl MapStore {
///     /// Runs `change` on the live record of `id` (`None` if there is none): one atomic step.
///     fn with<T>(&self, id: &str, change: impl FnOnce(&mut Option<Record>) -> T) -> T {
///         let mut map = self.0.lock().unwrap();
///         let mut record = map.remove(id).filter(|record| record.until > Instant::now());
///         let answer = change(&mut record);
///         if let Some(record) = record {
///             map.insert(id.to_owned(), record);
///         }
///         answer
///     }
/// }
///
/// fn record(token: &ClaimToken, completed: bool, ttl: Duration) -> Option<Record> {
///     Some(Record { token: *token, completed, until: Instant::now() + ttl })
/// }
///
/// #[async_trait]
/// impl IdempotencyStore for MapStore {
///     async fn claim(&self, who: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
///         Ok(self.with(who.event_id, |live| match live {
///             Some(record) if record.completed => Claim::Completed,
///             Some(_) => Claim::InFlight,
///             None => {
///                 *live = record(who.token, false, lease);
///                 Claim::Acquired
///             }
///         }))
///     }
///
///     async fn renew(&self, who: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
///         Ok(self.with(who.event_id, |live| match live {
///             Some(record) if record.token != *who.token => Renewal::TakenOver,
///             Some(record) if record.completed => Renewal::Held,
///             _ => {
///                 *live = record(who.token, false, lease);
///                 Renewal::Held
///             }
///         }))
///     }
///
///     async fn complete(&self, who: Claimant<'_>, retention: Duration)
///         -> Result<Completion, StoreError>
///     {
///         Ok(self.with(who.event_id, |live| match live {
///             Some(record) if record.token != *who.token => Completion::TakenOver,
///             _ => {
///                 *live = record(who.token, true, retention);
///                 Completion::Recorded
///             }
///         }))
///     }
///
///     async fn release(&self, who: Claimant<'_>) -> Result<Release, StoreError> {
///         Ok(self.with(who.event_id, |live| match live {
///             Some(record) if record.token == *who.token && !record.completed => {
///                 *live = None;
///                 Release::Released
///             }
///             _ => Release::NotHeld,
///         }))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (store, lease, retention) = (MapStore::default(), Duration::from_secs(30), Duration::from_secs(3600));
/// let (token, other, later) = (ClaimToken::generate(), ClaimToken::generate(), ClaimToken::generate());
/// let who = |token| Claimant::new("evt_1", "payment_intent.succeeded", token);
/// assert_eq!(store.claim(who(&token), lease).await.unwrap(), Claim::Acquired);
/// assert_eq!(store.claim(who(&other), lease).await.unwrap(), Claim::InFlight);
/// assert_eq!(store.renew(who(&token), lease).await.unwrap(), Renewal::Held);
/// assert_eq!(store.complete(who(&token), retention).await.unwrap(), Completion::Recorded);
/// assert_eq!(store.claim(who(&later), lease).await.unwrap(), Claim::Completed);
/// # }
/// ```
///
/// (A store that takes a lock across `await`s, or talks to a server, does the same
/// read-decide-write as one atomic step of its backend: one statement, one script.)
#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Atomically claims the event for the claimant's token, for `lease`.
    ///
    /// Answers [`Claim::Acquired`] when the id has no live record (unknown, or its lease or
    /// retention has run out), [`Claim::Completed`] when it was completed within the retention,
    /// and [`Claim::InFlight`] when another owner's lease is still running.
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError>;

    /// Extends the token's claim to `lease` from now, recording it again if the event has no
    /// live record. Answers [`Renewal::TakenOver`] when another owner holds or completed the
    /// event, and [`Renewal::Held`] when the token holds the claim, or completed the event.
    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError>;

    /// Records the event as completed by the token for `retention`, unless another owner holds
    /// it or completed it: [`Completion::Recorded`] (also when the token's own record had
    /// expired, been evicted or lost, and on a repeated completion by the same token), or
    /// [`Completion::TakenOver`] when another delivery took the event over (nothing is changed
    /// then).
    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError>;

    /// Forgets the token's live in-flight claim, so that the next delivery processes the
    /// event: [`Release::Released`], or [`Release::NotHeld`] when there was none (another
    /// owner's claim and a completed event are left as they are).
    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError>;
}

#[async_trait]
impl<T: IdempotencyStore + ?Sized> IdempotencyStore for Arc<T> {
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        (**self).claim(claimant, lease).await
    }

    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        (**self).renew(claimant, lease).await
    }

    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        (**self).complete(claimant, retention).await
    }

    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        (**self).release(claimant).await
    }
}
