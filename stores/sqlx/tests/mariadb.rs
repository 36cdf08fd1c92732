//! `MariaDbStore` (feature `mariadb`) against a real MariaDB server: the conformance suite and
//! the behaviours only a database shows.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx --features mariadb --
//! --include-ignored`, against `SANGHO_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`). Each test works in a table of its own, dropped when it
//! ends.

mod common;

use std::time::Duration;

use common::{LONG, acquire, bodies, mariadb_store, mariadb_store_on};
use sangho_webhook_sqlx::{MariaDbStore, sqlx::mysql::MySqlPoolOptions};

sangho_webhook::idempotency_store_conformance!(
    #[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    => async { mariadb_store("conf", 16).await }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn two_hundred_concurrent_claims_through_sixteen_connections_acquire_once() {
    let store = mariadb_store("race", 16).await;
    bodies::two_hundred_concurrent_claims_through_sixteen_connections_acquire_once(
        store.store.clone(),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn event_ids_are_case_sensitive() {
    let store = mariadb_store("case", 2).await;
    let token = acquire(&*store, "evt_Case", LONG).await;
    assert!(common::complete(&store, "evt_Case", &token, LONG).await);
    acquire(&*store, "evt_case", LONG).await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn completed_event_is_a_duplicate_after_the_pool_is_reopened() {
    let store = mariadb_store("reopen", 4).await;
    bodies::completed_event_is_a_duplicate_after_the_pool_is_reopened(&store.store, || {
        mariadb_store_on(store.table().as_str(), 4)
    })
    .await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn purge_removes_exactly_old_completions_and_old_abandoned_claims() {
    let store = mariadb_store("purge", 4).await;
    bodies::purge_removes_exactly_old_completions_and_old_abandoned_claims(&store.store).await;
}

/// Unreachable: nothing listens on port 1.
fn unreachable_store() -> MariaDbStore {
    let pool = MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("mysql://root@127.0.0.1:1/test")
        .unwrap();
    MariaDbStore::new(pool)
}

#[tokio::test]
async fn unreachable_database_gets_503_without_calling_the_handler() {
    bodies::claim_fails_within_the_acquire_timeout(&unreachable_store()).await;
    bodies::unavailable_store_gets_503_without_calling_the_handler(unreachable_store()).await;
}
