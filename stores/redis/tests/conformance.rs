//! The core conformance suite against the real Redis (`SANGHO_TEST_REDIS_URL`), each check
//! under its own key prefix. It includes 200 concurrent claims of one event and 100 concurrent
//! deliveries through the whole layer.
//!
//! `sangho_webhook::idempotency_store_conformance!` cannot take an `#[ignore]` attribute yet
//! (`$(#[$attribute:meta])* $make_store:expr` is ambiguous: an expression may start with an
//! attribute), so this file writes the same tests, one per check, with the same names.

mod common;

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            #[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
            async fn $check() {
                let store: std::sync::Arc<dyn sangho_webhook::store::IdempotencyStore> =
                    std::sync::Arc::new(common::TestStore::connect().await);
                sangho_webhook::testing::conformance::$check(store).await;
            }
        )*
    };
}

conformance!(
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
    concurrent_deliveries_run_the_handler_once,
);
