//! `SqliteStore` on temporary files: the conformance suite and the behaviours only a database
//! shows (reopening, purge, a database that cannot be opened, WAL mode). Not ignored: SQLite
//! needs no server.

mod common;

use std::time::Duration;

use common::{LONG, acquire, bodies, sqlite_store, sqlite_store_at};
use sangho_webhook::store::Completion;
use sangho_webhook::testing::conformance::unique_event_id;
use sangho_webhook_sqlx::{
    SqliteStore,
    sqlx::{
        self, Connection, Executor,
        sqlite::{SqliteConnection, SqlitePoolOptions},
    },
};

sangho_webhook::idempotency_store_conformance!(async { sqlite_store(16).await.under_test() });

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_claims_through_sixteen_connections_acquire_once() {
    let store = sqlite_store(16).await;
    bodies::two_hundred_concurrent_claims_through_sixteen_connections_acquire_once(
        store.store.clone(),
    )
    .await;
}

#[tokio::test]
async fn completed_event_is_a_duplicate_after_the_pool_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("webhooks.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    bodies::completed_event_is_a_duplicate_after_the_pool_is_reopened(&store, || async {
        SqliteStore::connect(&url).await.unwrap()
    })
    .await;
}

#[tokio::test]
async fn connect_creates_the_file_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let store = SqliteStore::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    assert!(path.exists());
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn migrate_switches_a_plain_pool_to_wal_and_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let pool = SqlitePoolOptions::new()
        .connect(&format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("plain.db").display()
        ))
        .await
        .unwrap();
    let store = SqliteStore::new(pool)
        .with_table_name("shop_events")
        .unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    acquire(&store, "evt_1", LONG).await;
}

#[tokio::test]
async fn purge_removes_exactly_the_rows_past_their_own_expiry() {
    let store = sqlite_store(4).await;
    bodies::purge_removes_exactly_the_rows_past_their_own_expiry(&store.store).await;
}

#[tokio::test]
async fn purge_task_purges_until_stopped() {
    let store = sqlite_store(2).await;
    bodies::purge_task_purges_until_stopped(&store.store).await;
}

/// A database that cannot be opened: its directory does not exist.
async fn unopenable_store() -> SqliteStore {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rw",
        dir.path().join("missing/webhooks.db").display()
    );
    let pool = SqlitePoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy(&url)
        .unwrap();
    SqliteStore::new(pool)
}

#[tokio::test]
async fn unopenable_database_is_a_store_error_within_the_acquire_timeout() {
    bodies::claim_fails_within_the_acquire_timeout(&unopenable_store().await).await;
}

#[tokio::test]
async fn unopenable_database_gets_503_without_calling_the_handler() {
    bodies::unavailable_store_gets_503_without_calling_the_handler(unopenable_store().await).await;
}

#[tokio::test]
async fn tables_in_one_file_are_independent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let first = sqlite_store_at(&path, 2).await;
    let second = sqlite_store_at(&path, 2)
        .await
        .with_table_name("other_events")
        .unwrap();
    first.migrate().await.unwrap();
    second.migrate().await.unwrap();
    let token = acquire(&first, "evt_1", LONG).await;
    assert_eq!(
        common::complete(&first, "evt_1", &token, LONG).await,
        Completion::Recorded
    );
    acquire(&second, "evt_1", LONG).await;
}

#[tokio::test]
async fn connect_accepts_the_mode_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rwc.db");
    let store = SqliteStore::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    acquire(&store, "evt_1", LONG).await;
    assert!(path.exists());
}

#[tokio::test]
async fn migrate_adopts_a_table_of_the_provider_schema() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store_at(&dir.path().join("adopt.db"), 2)
        .await
        .with_table_name(bodies::table_named_after_the_default())
        .unwrap();
    bodies::migrate_adopts_a_table_of_the_provider_schema(&store).await;
}

#[tokio::test]
async fn migrate_refuses_a_table_without_the_event_columns() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store_at(&dir.path().join("refuse.db"), 2).await;
    bodies::migrate_refuses_a_table_without_the_event_columns(&store).await;
}

#[tokio::test]
async fn purge_task_stops_promptly_while_its_purge_waits_for_a_lock() {
    use sangho_webhook_sqlx::sqlx::{Connection, Executor, sqlite::SqliteConnection};
    let store = sqlite_store(2).await;
    let url = store.pool().connect_options().get_filename().to_owned();
    bodies::purge_task_stops_promptly_while_its_purge_waits_for_a_lock(
        &store.store,
        || async move {
            // Another process's writer holds the database.
            let mut writer = SqliteConnection::connect(&format!("sqlite://{}", url.display()))
                .await
                .unwrap();
            writer.execute("BEGIN IMMEDIATE").await.unwrap();
            writer
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_sharing_one_database_run_the_handler_once_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let first = sqlite_store_at(&path, 8).await;
    first.migrate().await.unwrap();
    let second = sqlite_store_at(&path, 8).await;
    bodies::two_instances_run_the_handler_once_per_event([first, second]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_of_a_backlog_beside_32_claimers_fails_no_claim() {
    let store = sqlite_store(8).await;
    bodies::purge_of_a_backlog_beside_32_claimers_fails_no_claim(&store.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_longer_than_the_lease_runs_once() {
    let store = sqlite_store(4).await;
    bodies::a_handler_longer_than_the_lease_runs_once(store.store.clone()).await;
}

/// Another connection's open write transaction on the database file at `path` (`BEGIN
/// IMMEDIATE`): it holds SQLite's write lock.
async fn lock_database(path: &std::path::Path) -> SqliteConnection {
    let mut writer = SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    writer.execute("BEGIN IMMEDIATE").await.unwrap();
    writer
}

/// Ends the transaction of [`lock_database`].
async fn unlock_database(mut writer: SqliteConnection) {
    writer.execute("COMMIT").await.unwrap();
    writer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waits_on_the_write_lock_never_lands_after_its_503() {
    let store = sqlite_store(1).await;
    let path = store.pool().connect_options().get_filename().to_owned();
    let id = unique_event_id("writelock");
    bodies::a_claim_that_waits_on_a_lock_never_lands_after_its_503(
        store.store.clone(),
        &id,
        (|| lock_database(&path), unlock_database),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_waits_on_the_write_lock_gives_up_after_the_lock_timeout() {
    let store = sqlite_store(2).await;
    let path = store.pool().connect_options().get_filename().to_owned();
    let id = unique_event_id("renewlock");
    bodies::a_renewal_that_waits_on_a_lock_gives_up_after_the_lock_timeout(
        store.store.clone(),
        &id,
        (|| lock_database(&path), unlock_database),
    )
    .await;
}
