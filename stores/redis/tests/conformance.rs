//! The core conformance suite against the real Redis (`SANGHO_TEST_REDIS_URL`), each check
//! under its own key prefix. It includes 200 concurrent claims of one event and 100 concurrent
//! deliveries through the whole layer.

mod common;

sangho_webhook::idempotency_store_conformance!(
    #[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
    => async { common::store_under_test().await }
);
