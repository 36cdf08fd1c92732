//! `MokaStore` against the store conformance suite.

use sangho_webhook::store::MokaStore;

sangho_webhook::idempotency_store_conformance!(async { MokaStore::new() });

mod capacity {
    use std::time::Duration;

    use sangho_webhook::store::{Claim, ClaimToken, Claimant, IdempotencyStore, MokaStore};

    const TYPE: &str = "payment_intent.succeeded";

    #[tokio::test]
    async fn in_flight_claims_are_never_evicted_for_lack_of_room() {
        let store = MokaStore::with_capacity(10);
        let lease = Duration::from_secs(3600);
        let ids: Vec<String> = (0..500).map(|n| format!("evt_cap_{n}")).collect();
        for id in &ids {
            let token = ClaimToken::generate();
            let claim = store.claim(Claimant::new(id, TYPE, &token), lease).await;
            assert_eq!(claim.unwrap(), Claim::Acquired);
        }
        for id in &ids {
            let token = ClaimToken::generate();
            let again = store.claim(Claimant::new(id, TYPE, &token), lease).await;
            assert_eq!(again.unwrap(), Claim::InFlight, "{id} was acquired twice");
        }
    }
}

mod model {
    use std::{sync::Arc, time::Duration};

    use sangho_webhook::{store::MokaStore, testing::conformance};

    /// Many random histories, with 50 ms leases; `SANGHO_MODEL_CASES` runs more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn moka_store_follows_the_reference_model_over_many_histories() {
        let cases = conformance::model_cases(200);
        let store = Arc::new(MokaStore::new());
        conformance::store_follows_the_reference_model(store, cases, Duration::from_millis(50))
            .await;
    }
}
