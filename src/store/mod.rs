//! The idempotency store: where the layer remembers which events it has processed.
//!
//! The layer talks to a store through three operations, and only these:
//!
//! | operation | when | what the store does |
//! | --- | --- | --- |
//! | [`claim`](IdempotencyStore::claim) | a verified event arrives | atomically: if the id is unknown, or its previous claim's lease has expired, record an in-flight claim owned by a fresh [`ClaimToken`] and answer [`Claim::Acquired`]; otherwise answer [`Claim::Completed`] or [`Claim::InFlight`] |
//! | [`complete`](IdempotencyStore::complete) | the handler answered 2xx | if the token still owns the claim, mark the event completed and keep it for the retention |
//! | [`release`](IdempotencyStore::release) | the handler failed, panicked or was cancelled | if the token still owns the claim, forget it, so that the next delivery processes the event |
//!
//! A claim whose owner never comes back (the process crashed) expires with its lease, and the
//! next delivery takes it over. An owner whose claim was taken over is *stale*: its `complete`
//! and `release` change nothing. (Whether an owner whose lease expired, but whose claim nobody
//! took over yet, may still complete is the store's choice: either answer is safe.)
//!
//! The crate ships [`MokaStore`] (in memory, for tests and one-process development). Production
//! stores live in their own crates: `sangho-webhook-sqlx` (PostgreSQL, SQLite) and
//! `sangho-webhook-redis`. Any other store can be written against this trait and checked with
//! the conformance suite in `testing` (feature `test-util`).

mod memory;

pub use memory::MokaStore;

use std::{
    error::Error as StdError,
    fmt,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;

/// What [`IdempotencyStore::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The event was unknown (or its last claim's lease had expired): the caller now owns it and
    /// must [`complete`](IdempotencyStore::complete) or [`release`](IdempotencyStore::release)
    /// it with this token.
    Acquired(ClaimToken),
    /// The event was processed already: answer the provider with a duplicate acknowledgement.
    Completed,
    /// Another delivery holds a live claim on the event: the outcome is not known yet.
    InFlight,
}

/// Proof of ownership of a claim: 32 lowercase hex digits, unique across processes.
///
/// Stores create one with [`ClaimToken::generate`] when a claim is acquired, persist its
/// [`as_str`](ClaimToken::as_str) form next to the claim, and compare it on `complete` and
/// `release`.
///
/// A token is a 64-bit random number drawn once per process, followed by a 64-bit sequence
/// number: unique without a system call per claim. It identifies an owner, it is not a secret
/// (it never leaves the server).
///
/// ```
/// use sangho_webhook::store::ClaimToken;
///
/// let token = ClaimToken::generate();
/// assert_eq!(token.as_str().len(), 32);
/// assert_ne!(token, ClaimToken::generate());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClaimToken(String);

impl ClaimToken {
    /// A fresh token, never generated before by this or (with overwhelming probability) any
    /// other process.
    pub fn generate() -> Self {
        static PROCESS: LazyLock<u64> = LazyLock::new(process_nonce);
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        Self(format!("{:016x}{sequence:016x}", *PROCESS))
    }

    /// The token as text, for storing it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// 64 random bits for this process; the clock and the process id if the system's random
/// source fails (it does not, on any supported platform).
fn process_nonce() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        nanos ^ (u64::from(std::process::id()) << 32)
    })
}

impl fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClaimToken").field(&self.0).finish()
    }
}

impl fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

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
/// Implementations must make [`claim`](Self::claim) atomic: among any number of concurrent
/// claims of one id, exactly one may be acquired. The conformance suite in `testing` (feature
/// `test-util`) checks this and every other rule of the module docs.
///
/// # A complete custom store
///
/// A store over a mutex-guarded map (for illustration; [`MokaStore`] is the in-memory store to
/// use):
///
/// ```
/// use std::{collections::HashMap, sync::Mutex, time::{Duration, Instant}};
/// use async_trait::async_trait;
/// use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore, StoreError};
///
/// enum Record {
///     InFlight { token: ClaimToken, until: Instant },
///     Completed { until: Instant },
/// }
///
/// #[derive(Default)]
/// struct MapStore(Mutex<HashMap<String, Record>>);
///
/// #[async_trait]
/// impl IdempotencyStore for MapStore {
///     async fn claim(&self, event_id: &str, _event_type: &str, lease: Duration)
///         -> Result<Claim, StoreError>
///     {
///         let now = Instant::now();
///         let mut map = self.0.lock().unwrap();
///         match map.get(event_id) {
///             Some(Record::Completed { until }) if *until > now => return Ok(Claim::Completed),
///             Some(Record::InFlight { until, .. }) if *until > now => return Ok(Claim::InFlight),
///             _ => {}
///         }
///         let token = ClaimToken::generate();
///         map.insert(event_id.to_owned(), Record::InFlight { token: token.clone(), until: now + lease });
///         Ok(Claim::Acquired(token))
///     }
///
///     async fn complete(&self, event_id: &str, token: &ClaimToken, retention: Duration)
///         -> Result<bool, StoreError>
///     {
///         let now = Instant::now();
///         let mut map = self.0.lock().unwrap();
///         match map.get(event_id) {
///             Some(Record::InFlight { token: owner, .. }) if owner == token => {
///                 map.insert(event_id.to_owned(), Record::Completed { until: now + retention });
///                 Ok(true)
///             }
///             _ => Ok(false),
///         }
///     }
///
///     async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
///         let mut map = self.0.lock().unwrap();
///         match map.get(event_id) {
///             Some(Record::InFlight { token: owner, .. }) if owner == token => {
///                 map.remove(event_id);
///                 Ok(true)
///             }
///             _ => Ok(false),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MapStore::default();
/// let Claim::Acquired(token) = store.claim("evt_1", "payment_intent.succeeded", Duration::from_secs(30)).await.unwrap()
/// else { panic!("a new event is acquired") };
/// assert_eq!(store.claim("evt_1", "payment_intent.succeeded", Duration::from_secs(30)).await.unwrap(), Claim::InFlight);
/// assert!(store.complete("evt_1", &token, Duration::from_secs(3600)).await.unwrap());
/// assert_eq!(store.claim("evt_1", "payment_intent.succeeded", Duration::from_secs(30)).await.unwrap(), Claim::Completed);
/// # }
/// ```
#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Atomically claims `event_id` for `lease`.
    ///
    /// Answers [`Claim::Acquired`] when the id is unknown, or known only through a claim whose
    /// lease has expired, or a completion whose retention has passed; [`Claim::Completed`] when
    /// it was completed within the retention; [`Claim::InFlight`] when another owner's lease is
    /// still running. `event_type` is recorded for operators (the SQL schema has a column for
    /// it); it takes no part in the decision.
    async fn claim(
        &self,
        event_id: &str,
        event_type: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError>;

    /// Marks the event completed and keeps it for `retention`, if `token` still owns the claim
    /// on it. Answers whether it did: `false` means the owner was stale (its lease expired and
    /// another delivery took the event over, or the claim is gone), and nothing was changed.
    async fn complete(
        &self,
        event_id: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError>;

    /// Forgets the claim, if `token` still owns it, so that the next delivery processes the
    /// event. Answers whether it did; a stale owner changes nothing, and a completed event stays
    /// completed.
    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError>;
}

#[async_trait]
impl<T: IdempotencyStore + ?Sized> IdempotencyStore for Arc<T> {
    async fn claim(
        &self,
        event_id: &str,
        event_type: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        (**self).claim(event_id, event_type, lease).await
    }

    async fn complete(
        &self,
        event_id: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        (**self).complete(event_id, token, retention).await
    }

    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        (**self).release(event_id, token).await
    }
}
