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

use std::{sync::Arc, time::Duration};

use http::StatusCode;

use crate::{
    SanghoWebhookLayer,
    signature::Secret,
    store::{Claim, ClaimToken, IdempotencyStore},
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

const TYPE: &str = "payment_intent.succeeded";

/// A fresh event id, unique across runs and processes: `evt_<label>_<unique>`.
///
/// # Panics
///
/// If `label` is longer than 12 characters (the id would exceed 50).
pub fn unique_event_id(label: &str) -> String {
    assert!(label.len() <= 12, "the label {label:?} is longer than 12");
    format!("evt_{label}_{}", ClaimToken::generate())
}

async fn acquire(store: &dyn IdempotencyStore, id: &str, lease: Duration) -> ClaimToken {
    match store.claim(id, TYPE, lease).await {
        Ok(Claim::Acquired(token)) => token,
        other => panic!("claiming {id} should acquire it, got {other:?}"),
    }
}

async fn claim(store: &dyn IdempotencyStore, id: &str) -> Claim {
    store
        .claim(id, TYPE, LONG)
        .await
        .unwrap_or_else(|error| panic!("claiming {id} failed: {error:?}"))
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
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// A completed event stays completed after its lease would have expired: completion replaces
/// the lease with the retention.
pub async fn completed_event_outlives_the_lease(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("outlives");
    let token = acquire(&*store, &id, SHORT).await;
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// `complete` with a token that does not own the claim answers `false` and changes nothing.
pub async fn complete_with_wrong_token_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("wrongdone");
    let token = acquire(&*store, &id, LONG).await;
    assert!(
        !store
            .complete(&id, &ClaimToken::generate(), LONG)
            .await
            .unwrap()
    );
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
    // The owner can still complete it.
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// `release` with a token that does not own the claim answers `false` and changes nothing.
pub async fn release_with_wrong_token_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("wrongfree");
    acquire(&*store, &id, LONG).await;
    assert!(!store.release(&id, &ClaimToken::generate()).await.unwrap());
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
}

/// After its owner releases it, the next claim acquires the event again.
pub async fn released_event_is_acquired_again(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("released");
    let token = acquire(&*store, &id, LONG).await;
    assert!(store.release(&id, &token).await.unwrap());
    let second = acquire(&*store, &id, LONG).await;
    assert_ne!(second, token);
}

/// Releasing a completed event (even by its former owner) changes nothing.
pub async fn release_after_complete_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("donefree");
    let token = acquire(&*store, &id, LONG).await;
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    assert!(!store.release(&id, &token).await.unwrap());
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// Operations on an unknown event answer `false` and create nothing.
pub async fn settling_an_unknown_event_changes_nothing(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("unknown");
    let token = ClaimToken::generate();
    assert!(!store.complete(&id, &token, LONG).await.unwrap());
    assert!(!store.release(&id, &token).await.unwrap());
    acquire(&*store, &id, LONG).await;
}

/// A claim whose lease expired (its owner crashed) is taken over by the next claim, and the
/// stale owner can then neither complete nor release it.
pub async fn expired_lease_is_taken_over(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("expired");
    let stale = acquire(&*store, &id, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let owner = acquire(&*store, &id, LONG).await;
    assert_ne!(owner, stale);
    assert!(!store.complete(&id, &stale, LONG).await.unwrap());
    assert!(!store.release(&id, &stale).await.unwrap());
    assert_eq!(claim(&*store, &id).await, Claim::InFlight);
    assert!(store.complete(&id, &owner, LONG).await.unwrap());
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
}

/// A completed event is forgotten once its retention has passed.
pub async fn completed_event_is_forgotten_after_retention(store: Arc<dyn IdempotencyStore>) {
    let id = unique_event_id("forgotten");
    let token = acquire(&*store, &id, LONG).await;
    assert!(store.complete(&id, &token, SHORT).await.unwrap());
    assert_eq!(claim(&*store, &id).await, Claim::Completed);
    tokio::time::sleep(PAST_SHORT).await;
    acquire(&*store, &id, LONG).await;
}

/// Claims of different events do not interfere.
pub async fn events_are_independent(store: Arc<dyn IdempotencyStore>) {
    let (first, second) = (unique_event_id("one"), unique_event_id("two"));
    let token = acquire(&*store, &first, LONG).await;
    acquire(&*store, &second, LONG).await;
    assert!(store.complete(&first, &token, LONG).await.unwrap());
    assert_eq!(claim(&*store, &first).await, Claim::Completed);
    assert_eq!(claim(&*store, &second).await, Claim::InFlight);
}

/// [`CONCURRENT_CLAIMS`] concurrent claims of one event, from many tasks: exactly one acquires,
/// all others see it in flight.
pub async fn concurrent_claims_yield_exactly_one_acquired(store: Arc<dyn IdempotencyStore>) {
    let id: Arc<str> = unique_event_id("race").into();
    let barrier = Arc::new(tokio::sync::Barrier::new(CONCURRENT_CLAIMS));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENT_CLAIMS {
        let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            store.claim(&id, TYPE, LONG).await
        });
    }
    let (mut acquired, mut in_flight) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("claim task panicked") {
            Ok(Claim::Acquired(_)) => acquired += 1,
            Ok(Claim::InFlight) => in_flight += 1,
            other => panic!("a concurrent claim answered {other:?}"),
        }
    }
    assert_eq!(
        (acquired, in_flight),
        (1, CONCURRENT_CLAIMS - 1),
        "exactly one of {CONCURRENT_CLAIMS} concurrent claims may acquire"
    );
}

/// How many concurrent deliveries [`concurrent_deliveries_run_the_handler_once`] makes.
pub const CONCURRENT_DELIVERIES: usize = 100;

/// [`CONCURRENT_DELIVERIES`] concurrent deliveries of one event through the whole layer over
/// this store: the handler runs exactly once; every other delivery is answered 200-duplicate or
/// 409; and a redelivery afterwards is a duplicate.
pub async fn concurrent_deliveries_run_the_handler_once(store: Arc<dyn IdempotencyStore>) {
    let secret = Secret::new(fixtures::SECRET).expect("the fixture secret is not empty");
    let handler = CountingHandler::new().with_delay(Duration::from_millis(50));
    let layer = SanghoWebhookLayer::new(secret.clone(), store).with_clock(fixtures::fixed_clock);
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

/// Writes one `#[tokio::test]` per conformance check, each with a store from `$make_store` (an
/// expression evaluating to a future of the store).
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
        $crate::__conformance_tests!(
            [$($attribute)*] $make_store;
            first_claim_acquires,
            second_claim_while_leased_is_in_flight,
            completed_event_is_completed,
            completed_event_outlives_the_lease,
            complete_with_wrong_token_changes_nothing,
            release_with_wrong_token_changes_nothing,
            released_event_is_acquired_again,
            release_after_complete_changes_nothing,
            settling_an_unknown_event_changes_nothing,
            expired_lease_is_taken_over,
            completed_event_is_forgotten_after_retention,
            events_are_independent,
            concurrent_claims_yield_exactly_one_acquired,
            concurrent_deliveries_run_the_handler_once
        );
    };
    ([$($attribute:tt)*] $make_store:expr;) => {};
    ([$($attribute:tt)*] $make_store:expr; $check:ident $(, $rest:ident)*) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $($attribute)*
        async fn $check() {
            let store: ::std::sync::Arc<dyn $crate::store::IdempotencyStore> =
                ::std::sync::Arc::new($make_store.await);
            $crate::testing::conformance::$check(store).await;
        }
        $crate::__conformance_tests!([$($attribute)*] $make_store; $($rest),*);
    };
}
