//! Inbox mode on PostgreSQL: the inbox conformance suite, each check in a table of its own.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx -- --include-ignored`,
//! against `SANGHO_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).

mod common;

use common::postgres_store;

sangho_webhook::inbox_conformance!(
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    => async { postgres_store("inbox", 16).await.inbox_under_test() }
);
