//! The conformance suite: the rules every [`IdempotencyStore`] must follow, one check per rule.
//!
//! Run it against a store with [`idempotency_store_conformance!`](crate::idempotency_store_conformance),
//! which writes one `#[tokio::test]` per check (your crate needs `tokio` with the `macros` and
//! `rt-multi-thread` features as a dev-dependency):
//!
//! ```
//! # mod wrapper {
//! sangho_webhook::idempotency_store_conformance!(async { sangho_webhook::store::MokaStore::new() });
//! # }
//! ```
//!
//! Attributes before the expression go on every test, e.g. an `#[ignore = "needs a server"]`.
//! Every check uses fresh, random event ids, so a store may be shared between checks and
//! between runs. The expiry checks use a one-second lease or retention and wait a little over
//! two seconds, so a store whose clock counts whole seconds passes too.

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use http::StatusCode;

use crate::{
    SanghoWebhookLayer,
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal},
    testing::{CountingHandler, Delivery, fixtures, send},
};

/// The short lease or retention of the expiry checks.
pub const SHORT: Duration = Duration::from_secs(1);
/// How long the expiry checks wait for [`SHORT`] to pass.
pub const PAST_SHORT: Duration = Duration::from_millis(2_100);
/// A lease or retention that no check outlives.
pub const LONG: Duration = Duration::from_secs(3_600);
/// How many concurrent claims [`concurrent_claims_yield_exactly_one_acquired`] makes.
pub const CONCURRENT_CLAIMS: usize = 200;

/// A fresh event id, unique across runs and processes: `evt_<label>_<unique>`.
///
/// # Panics
///
/// If `label` is longer than 12 characters (the id would exceed 50).
pub fn unique_event_id(label: &str) -> String {
    assert!(label.len() <= 12, "the label {label:?} is longer than 12");
    format!("evt_{label}_{}", ClaimToken::generate())
}

const TYPE: &str = fixtures::EVENT_TYPE;

/// Claims `id` with a fresh token for `lease`, and panics unless the claim is acquired.
pub async fn acquire(store: &dyn IdempotencyStore, id: &str, lease: Duration) -> ClaimToken {
    let token = ClaimToken::generate();
    match store.claim(Claimant::new(id, TYPE, &token), lease).await {
        Ok(Claim::Acquired) => token,
        other => panic!("claiming {id} should acquire it, got {other:?}"),
    }
}

/// Claims `id` with a fresh token and a long lease, and answers what the store found.
async fn claim(store: &dyn IdempotencyStore, id: &str) -> Claim {
    store
        .claim(Claimant::new(id, TYPE, &ClaimToken::generate()), LONG)
        .await
        .unwrap_or_else(|error| panic!("claiming {id} failed: {error:?}"))
}

async fn renew(
    store: &dyn IdempotencyStore,
    id: &str,
    token: &ClaimToken,
    lease: Duration,
) -> Renewal {
    store
        .renew(Claimant::new(id, TYPE, token), lease)
        .await
        .unwrap_or_else(|error| panic!("renewing {id} failed: {error:?}"))
}

async fn complete(
    store: &dyn IdempotencyStore,
    id: &str,
    token: &ClaimToken,
    retention: Duration,
) -> Completion {
    store
        .complete(Claimant::new(id, TYPE, token), retention)
        .await
        .unwrap_or_else(|error| panic!("completing {id} failed: {error:?}"))
}

async fn release(store: &dyn IdempotencyStore, id: &str, token: &ClaimToken) -> Release {
    store
        .release(Claimant::new(id, TYPE, token))
        .await
        .unwrap_or_else(|error| panic!("releasing {id} failed: {error:?}"))
}

/// The first claim of an unknown event acquires it.
pub async fn first_claim_acquires(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("first");
    acquire(&*store, &id, LONG).await;
}

/// A second claim while the first one's lease runs is in flight.
pub async fn second_claim_while_leased_is_in_flight(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("second");
    acquire(&*store, &id, LONG).await;
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
}

/// Once completed by its owner, an event is completed.
pub async fn completed_event_is_completed(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("completed");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// A completed event stays completed after its lease would have expired: completion replaces
/// the lease with the retention.
pub async fn completed_event_outlives_the_lease(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("outlives");
    let token = acquire(&*store, &id, SHORT).await;
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// `complete` with a token that does not own the live claim answers `false` and changes
/// nothing; the owner can still complete.
pub async fn complete_while_another_holds_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("wrongdone");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &ClaimToken::generate(), LONG).await,
        Completion::TakenOver
    );
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// `complete` by another token after the event was completed answers `false`.
pub async fn complete_after_another_completed_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("othersdone");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(
        complete(&*store, &id, &ClaimToken::generate(), LONG).await,
        Completion::TakenOver
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// A repeated completion by the same token succeeds.
pub async fn repeated_completion_succeeds(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("twice");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// An owner whose lease ran out, but whose event nobody took over, still completes it.
pub async fn complete_after_own_lease_expired_succeeds(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("latedone");
    let token = acquire(&*store, &id, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// A completion whose claim record is gone (evicted, lost by the backend) records the event.
pub async fn complete_without_a_record_records_the_event(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("lostdone");
    assert_eq!(
        complete(&*store, &id, &ClaimToken::generate(), LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// `release` with a token that does not own the claim answers `false` and changes nothing.
pub async fn release_with_wrong_token_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("wrongfree");
    acquire(&*store, &id, LONG).await;
    assert_eq!(
        release(&*store, &id, &ClaimToken::generate()).await,
        Release::NotHeld
    );
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
}

/// After its owner releases it, the next claim acquires the event again.
pub async fn released_event_is_acquired_again(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("released");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(release(&*store, &id, &token).await, Release::Released);
    let second = acquire(&*store, &id, LONG).await;
    assert_ne!(second, token);
}

/// Releasing a completed event (even by its former owner) changes nothing.
pub async fn release_after_complete_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("donefree");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(release(&*store, &id, &token).await, Release::NotHeld);
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// Releasing an unknown event answers `false` and creates nothing.
pub async fn releasing_an_unknown_event_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("unknown");
    assert_eq!(
        release(&*store, &id, &ClaimToken::generate()).await,
        Release::NotHeld
    );
    acquire(&*store, &id, LONG).await;
}

/// Renewing extends the owner's lease: after the first lease would have run out, the event is
/// still in flight.
pub async fn renew_extends_the_lease(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("renewed");
    let token = acquire(&*store, &id, SHORT).await;
    assert_eq!(renew(&*store, &id, &token, LONG).await, Renewal::Held);
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
}

/// Another token cannot renew a live claim, and its attempt changes nothing.
pub async fn renew_by_another_token_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("otherrenew");
    let token = acquire(&*store, &id, SHORT).await;
    assert_eq!(
        renew(&*store, &id, &ClaimToken::generate(), LONG).await,
        Renewal::TakenOver
    );
    tokio::time::sleep(PAST_SHORT).await;
    // The owner's short lease was not extended: the event is taken over.
    let next = acquire(&*store, &id, LONG).await;
    assert_eq!(renew(&*store, &id, &token, LONG).await, Renewal::TakenOver);
    assert_eq!(
        complete(&*store, &id, &next, LONG).await,
        Completion::Recorded
    );
}

/// An owner whose lease ran out, but whose event nobody took over, renews it back.
pub async fn renew_after_own_lease_expired_keeps_the_claim(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("laterenew");
    let token = acquire(&*store, &id, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(renew(&*store, &id, &token, LONG).await, Renewal::Held);
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
}

/// Renewing a completed event by its owner answers `true` and leaves it completed; by another
/// token, `false`.
pub async fn renew_after_completion_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("donerenew");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(renew(&*store, &id, &token, LONG).await, Renewal::Held);
    assert_eq!(
        renew(&*store, &id, &ClaimToken::generate(), LONG).await,
        Renewal::TakenOver
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// A claim whose lease expired (its owner crashed) is taken over by the next claim; the stale
/// owner can then neither renew, complete nor release it.
pub async fn expired_lease_is_taken_over(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("expired");
    let stale = acquire(&*store, &id, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let owner = acquire(&*store, &id, LONG).await;
    assert_ne!(owner, stale);
    assert_eq!(renew(&*store, &id, &stale, LONG).await, Renewal::TakenOver);
    assert_eq!(
        complete(&*store, &id, &stale, LONG).await,
        Completion::TakenOver
    );
    assert_eq!(release(&*store, &id, &stale).await, Release::NotHeld);
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
    assert_eq!(
        complete(&*store, &id, &owner, LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// A completed event is forgotten once its retention has passed.
pub async fn completed_event_is_forgotten_after_retention(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("forgotten");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &token, SHORT).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
    tokio::time::sleep(PAST_SHORT).await;
    acquire(&*store, &id, LONG).await;
}

/// Claims of different events do not interfere.
pub async fn events_are_independent(store: Arc<dyn IdempotencyStore>) {
    let (first, second) = (unique_event_id("one"), unique_event_id("two"));
    let token = acquire(&*store, &first, LONG).await;
    acquire(&*store, &second, LONG).await;
    assert_eq!(
        complete(&*store, &first, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(&*store, &first).await, Claim::Completed);
    assert_eq!(claim(&*store, &second).await, Claim::InFlight);
}

/// `claimers` concurrent claims of `id`, each with its own token, released together: the
/// number acquired and the number in flight.
async fn race(store: &Arc<dyn IdempotencyStore>, id: &str, claimers: usize) -> (usize, usize) {
    let id: Arc<str> = id.into();
    let barrier = Arc::new(tokio::sync::Barrier::new(claimers));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..claimers {
        let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let token = ClaimToken::generate();
            store.claim(Claimant::new(&id, TYPE, &token), LONG).await
        });
    }
    let (mut acquired, mut in_flight) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("claim task panicked") {
            Ok(Claim::Acquired) => acquired += 1,
            Ok(Claim::InFlight) => in_flight += 1,
            other => panic!("a concurrent claim answered {other:?}"),
        }
    }
    (acquired, in_flight)
}

/// [`CONCURRENT_CLAIMS`] concurrent claims of one event, from many tasks: exactly one acquires,
/// all others see it in flight.
pub async fn concurrent_claims_yield_exactly_one_acquired(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("race");
    assert_eq!(
        race(&store, &id, CONCURRENT_CLAIMS).await,
        (1, CONCURRENT_CLAIMS - 1),
        "exactly one of {CONCURRENT_CLAIMS} concurrent claims may acquire"
    );
}

/// How many concurrent claimers race for an expired record in the takeover checks.
pub const TAKEOVER_CLAIMERS: usize = 100;

/// [`TAKEOVER_CLAIMERS`] concurrent claims of an event whose lease expired: exactly one takes
/// it over.
pub async fn concurrent_takeover_of_an_expired_lease_has_one_winner(
    store: Arc<dyn IdempotencyStore>,
) {
    let id = unique_event_id("leaserace");
    acquire(&*store, &id, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        race(&store, &id, TAKEOVER_CLAIMERS).await,
        (1, TAKEOVER_CLAIMERS - 1),
        "exactly one of {TAKEOVER_CLAIMERS} claimers may take over an expired lease"
    );
}

/// [`TAKEOVER_CLAIMERS`] concurrent claims of an event whose retention passed: exactly one
/// acquires it.
pub async fn concurrent_takeover_of_an_expired_retention_has_one_winner(
    store: Arc<dyn IdempotencyStore>,
) {
    let id = unique_event_id("keptrace");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        complete(&*store, &id, &token, SHORT).await,
        Completion::Recorded
    );
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        race(&store, &id, TAKEOVER_CLAIMERS).await,
        (1, TAKEOVER_CLAIMERS - 1),
        "exactly one of {TAKEOVER_CLAIMERS} claimers may acquire an event past its retention"
    );
}

/// How many random histories [`store_follows_the_reference_model`] runs: the
/// `SANGHO_MODEL_CASES` environment variable, or `default`.
pub fn model_cases(default: usize) -> usize {
    std::env::var("SANGHO_MODEL_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

/// Random histories of claim, renew, complete, release and time passing, on two events and
/// three owners, each checked step by step against a reference model of the rules.
///
/// `cases` histories of up to 12 steps run; records are written with a lease or retention of
/// either `short` or an hour, and "time passing" sleeps a little over twice `short`, so that
/// every step falls clearly before or after an expiry. Each history uses fresh ids. A failure
/// names the seed, the history and the step; set `SANGHO_MODEL_SEED` to replay it. A
/// disagreement after more than `short` of real time since the last wait (a loaded machine)
/// proves nothing, and its history is run again, up to five times.
pub async fn store_follows_the_reference_model(
    store: Arc<dyn IdempotencyStore>,
    cases: usize,
    short: Duration,
) {
    let seed = std::env::var("SANGHO_MODEL_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    for case in 0..cases {
        let history = super::model::history(&mut rng);
        // A history whose steps took longer than `short` in real time (a loaded machine) can
        // see a short record run out before the model's wait: it is run again, on fresh ids.
        let mut attempts = 0;
        while let Err(failure) = super::model::check(&*store, &history, short, LONG).await {
            attempts += 1;
            if !failure.inconclusive || attempts == 5 {
                panic!("seed {seed}, case {case}: {failure}\nhistory: {history:#?}");
            }
        }
    }
}

/// [`store_follows_the_reference_model`] with [`model_cases`]`(50)` histories and leases of
/// 300 ms: the form the conformance macro runs.
pub async fn reference_model(store: Arc<dyn IdempotencyStore>) {
    store_follows_the_reference_model(store, model_cases(50), Duration::from_millis(300)).await;
}

/// How many concurrent deliveries [`concurrent_deliveries_run_the_handler_once`] makes.
pub const CONCURRENT_DELIVERIES: usize = 100;

/// [`CONCURRENT_DELIVERIES`] concurrent deliveries of one event through the whole layer over
/// this store: the handler runs exactly once; every other delivery is answered 200-duplicate or
/// 409; and a redelivery afterwards is a duplicate.
pub async fn concurrent_deliveries_run_the_handler_once(store: Arc<dyn IdempotencyStore>) {
    let secret = fixtures::secret();
    let handler = CountingHandler::new().with_delay(Duration::from_millis(50));
    let layer = SanghoWebhookLayer::builder(secret.clone(), store)
        .with_clock(fixtures::fixed_clock)
        .build()
        .expect("valid settings");
    let service = tower_layer::Layer::layer(&layer, handler.clone());
    let id = unique_event_id("deliver");
    let delivery = Delivery::event(&id, TYPE).signed(&secret, fixtures::NOW);

    let barrier = Arc::new(tokio::sync::Barrier::new(CONCURRENT_DELIVERIES));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENT_DELIVERIES {
        let (service, request, barrier) = (
            service.clone(),
            delivery.clone().into_request(),
            barrier.clone(),
        );
        tasks.spawn(async move {
            barrier.wait().await;
            send(&service, request).await.status
        });
    }
    let mut statuses = Vec::with_capacity(CONCURRENT_DELIVERIES);
    while let Some(joined) = tasks.join_next().await {
        statuses.push(joined.expect("delivery task panicked"));
    }
    assert_eq!(handler.calls(), 1, "the handler must run exactly once");
    assert!(
        statuses
            .iter()
            .all(|status| matches!(*status, StatusCode::OK | StatusCode::CONFLICT)),
        "every delivery is answered 200 or 409: {statuses:?}"
    );

    let again = send(&service, delivery.into_request()).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        handler.calls(),
        1,
        "a redelivery after completion is a duplicate"
    );
}

/// A store for the conformance suite, and what must live as long as it: a guard that drops
/// the check's table or deletes its keys when the check ends.
///
/// Any store converts into one without a guard; a store on shared infrastructure adds its
/// cleanup:
///
/// ```
/// use sangho_webhook::{store::MokaStore, testing::conformance::StoreUnderTest};
///
/// struct DropTable(&'static str);
/// impl Drop for DropTable {
///     fn drop(&mut self) { /* DROP TABLE self.0 */ }
/// }
///
/// let plain = StoreUnderTest::from(MokaStore::new());
/// let cleaned = StoreUnderTest::new(MokaStore::new()).with_cleanup(DropTable("t_1"));
/// # let _ = (plain.store(), cleaned);
/// ```
pub struct StoreUnderTest {
    store: Arc<dyn IdempotencyStore>,
    _cleanup: Box<dyn Send>,
}

impl StoreUnderTest {
    /// `store`, with nothing to clean up.
    pub fn new(store: impl IdempotencyStore) -> Self {
        Self::shared(Arc::new(store))
    }

    /// A store already shared, with nothing to clean up.
    pub fn shared(store: Arc<dyn IdempotencyStore>) -> Self {
        Self {
            store,
            _cleanup: Box::new(()),
        }
    }

    /// Keeps `cleanup` until this value is dropped, after the check that uses the store.
    pub fn with_cleanup(self, cleanup: impl Send + 'static) -> Self {
        Self {
            store: self.store,
            _cleanup: Box::new(cleanup),
        }
    }

    /// The store, for a check.
    pub fn store(&self) -> Arc<dyn IdempotencyStore> {
        self.store.clone()
    }
}

impl<S: IdempotencyStore> From<S> for StoreUnderTest {
    fn from(store: S) -> Self {
        Self::new(store)
    }
}

impl std::fmt::Debug for StoreUnderTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreUnderTest").finish_non_exhaustive()
    }
}

/// A conformance check over a store, its future boxed so that every check fits in [`CHECKS`].
pub type Check = fn(Arc<dyn IdempotencyStore>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every conformance check with its name, in the order
/// [`idempotency_store_conformance!`](crate::idempotency_store_conformance) writes their tests:
/// for running the suite some other way, e.g. every check at once against one store that is
/// costly to set up. A check passes unless it panics.
///
/// ```
/// use std::sync::Arc;
///
/// use sangho_webhook::{
///     store::{IdempotencyStore, MokaStore},
///     testing::conformance::CHECKS,
/// };
///
/// # #[tokio::main(flavor = "multi_thread")]
/// # async fn main() {
/// let store: Arc<dyn IdempotencyStore> = Arc::new(MokaStore::new());
/// let mut checks = tokio::task::JoinSet::new();
/// for &(name, check) in CHECKS {
///     let store = store.clone();
///     checks.spawn(async move { (name, tokio::spawn(check(store)).await.is_ok()) });
/// }
/// let mut failed = Vec::new();
/// while let Some(done) = checks.join_next().await {
///     let (name, passed) = done.expect("a check task");
///     if !passed {
///         failed.push(name);
///     }
/// }
/// assert_eq!(failed, Vec::<&str>::new(), "these checks failed");
/// # }
/// ```
pub const CHECKS: &[(&str, Check)] = crate::__conformance_tests! { @with_every_check [@list] };

/// Writes one `#[tokio::test]` per conformance check, each with a store from `$make_store` (an
/// expression evaluating to a future of the store, or of a [`StoreUnderTest`] that carries
/// the store's cleanup).
///
/// Attributes for every test go before the expression, followed by `=>`:
///
/// ```
/// # mod wrapper {
/// use sangho_webhook::store::MokaStore;
///
/// sangho_webhook::idempotency_store_conformance!(async { MokaStore::new() });
/// # }
/// # mod ignored {
/// # use sangho_webhook::store::MokaStore;
/// sangho_webhook::idempotency_store_conformance!(
///     #[ignore = "needs a server: run with --include-ignored"] => async { MokaStore::new() }
/// );
/// # }
/// ```
#[macro_export]
macro_rules! idempotency_store_conformance {
    ($(#[$attribute:meta])+ => $make_store:expr $(,)?) => {
        $crate::__conformance_tests!(@every_check [$(#[$attribute])+] $make_store);
    };
    ($make_store:expr $(,)?) => {
        $crate::__conformance_tests!(@every_check [] $make_store);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    (@every_check [$($attribute:tt)*] $make_store:expr) => {
        $crate::__conformance_tests!(@with_every_check [[$($attribute)*] $make_store;]);
    };
    // The one list of the checks: calls this macro with `$before` followed by every check.
    (@with_every_check [$($before:tt)*]) => {
        $crate::__conformance_tests! {
            $($before)*
            first_claim_acquires,
            second_claim_while_leased_is_in_flight,
            completed_event_is_completed,
            completed_event_outlives_the_lease,
            complete_while_another_holds_changes_nothing,
            complete_after_another_completed_changes_nothing,
            repeated_completion_succeeds,
            complete_after_own_lease_expired_succeeds,
            complete_without_a_record_records_the_event,
            release_with_wrong_token_changes_nothing,
            released_event_is_acquired_again,
            release_after_complete_changes_nothing,
            releasing_an_unknown_event_changes_nothing,
            renew_extends_the_lease,
            renew_by_another_token_changes_nothing,
            renew_after_own_lease_expired_keeps_the_claim,
            renew_after_completion_changes_nothing,
            expired_lease_is_taken_over,
            completed_event_is_forgotten_after_retention,
            events_are_independent,
            concurrent_claims_yield_exactly_one_acquired,
            concurrent_takeover_of_an_expired_lease_has_one_winner,
            concurrent_takeover_of_an_expired_retention_has_one_winner,
            concurrent_deliveries_run_the_handler_once,
            reference_model
        }
    };
    // The entries of `CHECKS`.
    (@list $($check:ident),*) => {
        &[$((
            ::core::stringify!($check),
            |store| ::std::boxed::Box::pin($crate::testing::conformance::$check(store)),
        )),*]
    };
    ([$($attribute:tt)*] $make_store:expr;) => {};
    ([$($attribute:tt)*] $make_store:expr; $check:ident $(, $rest:ident)*) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $($attribute)*
        async fn $check() {
            let under_test: $crate::testing::conformance::StoreUnderTest =
                ::core::convert::From::from($make_store.await);
            $crate::testing::conformance::$check(under_test.store()).await;
        }
        $crate::__conformance_tests!([$($attribute)*] $make_store; $($rest),*);
    };
}
