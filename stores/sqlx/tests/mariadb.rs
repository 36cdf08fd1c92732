//! `MariaDbStore` (feature `mariadb`) against a real MariaDB server: the conformance suite and
//! the behaviours only a database shows.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx --features mariadb --
//! --include-ignored`, against `SANGHO_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`). Each test works in a table of its own, dropped when it
//! ends.

mod common;

use std::time::Duration;

use common::{LONG, acquire, bodies, bodies::TestDatabase as _, mariadb_store, mariadb_store_on};
use sangho_webhook::store::Completion;
use sangho_webhook_sqlx::{MariaDbStore, sqlx::mysql::MySqlPoolOptions};

sangho_webhook::idempotency_store_conformance!(
    #[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    => async { mariadb_store("conf", 16).await.under_test() }
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
    assert_eq!(
        common::complete(&*store, "evt_Case", &token, LONG).await,
        Completion::Recorded
    );
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
async fn purge_removes_exactly_the_rows_past_their_own_expiry() {
    let store = mariadb_store("purge", 4).await;
    bodies::purge_removes_exactly_the_rows_past_their_own_expiry(&store.store).await;
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

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn migrate_adopts_a_table_of_the_provider_schema() {
    let table = bodies::table_named_after_the_default();
    let _cleanup = common::MariaDbTableGuard(table.clone());
    let store = mariadb_store_on(&table, 2).await;
    bodies::migrate_adopts_a_table_of_the_provider_schema(&store).await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn migrate_refuses_a_table_without_the_event_columns() {
    let table = common::unique_table("refuse");
    let _cleanup = common::MariaDbTableGuard(table.clone());
    let store = mariadb_store_on(&table, 2).await;
    bodies::migrate_refuses_a_table_without_the_event_columns(&store).await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn migrate_gives_up_while_another_migration_holds_the_lock() {
    use sangho_webhook_sqlx::sqlx::{self, Connection, mysql::MySqlConnection};
    let table = common::unique_table("locked");
    let _cleanup = common::MariaDbTableGuard(table.clone());
    let store = mariadb_store_on(&table, 2).await;
    // Another replica's migration, stuck.
    let mut other = MySqlConnection::connect(&common::mariadb_url())
        .await
        .unwrap();
    let (held,): (i64,) = sqlx::query_as("SELECT GET_LOCK(CONCAT('sangho_migrate_', ?), 0)")
        .bind(&table)
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert_eq!(held, 1);
    let migrated = tokio::time::timeout(Duration::from_secs(20), store.migrate())
        .await
        .expect("migrate gives up in bounded time");
    assert!(
        matches!(
            migrated,
            Err(sangho_webhook_sqlx::Error::MigrationLocked { .. })
        ),
        "{migrated:?}"
    );
    assert!(
        store.event_ids_or_none().await.is_none(),
        "nothing was created"
    );
    other.close().await.unwrap();
    store
        .migrate()
        .await
        .expect("once the lock is free, migrate runs");
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn connect_runs_its_connections_at_read_committed_in_utc() {
    use sangho_webhook_sqlx::sqlx;
    let store = MariaDbStore::connect(&common::mariadb_url()).await.unwrap();
    let (isolation, zone): (String, String) =
        sqlx::query_as("SELECT @@session.tx_isolation, @@session.time_zone")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(
        (isolation.as_str(), zone.as_str()),
        ("READ-COMMITTED", "+00:00")
    );
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn purge_task_purges_until_stopped() {
    let store = mariadb_store("task", 2).await;
    bodies::purge_task_purges_until_stopped(&store.store).await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn purge_task_stops_promptly_while_its_purge_waits_for_a_lock() {
    use sangho_webhook_sqlx::sqlx::{self, AssertSqlSafe, Connection, mysql::MySqlConnection};
    let store = mariadb_store("stop", 2).await;
    let table = store.table().as_str().to_owned();
    bodies::purge_task_stops_promptly_while_its_purge_waits_for_a_lock(
        &store.store,
        || async move {
            let mut other = MySqlConnection::connect(&common::mariadb_url())
                .await
                .unwrap();
            sqlx::raw_sql(AssertSqlSafe(format!("LOCK TABLES {table} WRITE")))
                .execute(&mut other)
                .await
                .unwrap();
            other
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn two_instances_sharing_one_database_run_the_handler_once_per_event() {
    let store = mariadb_store("twoapps", 16).await;
    let second = mariadb_store_on(store.table().as_str(), 16).await;
    bodies::two_instances_run_the_handler_once_per_event([store.store.clone(), second]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn purge_of_a_backlog_beside_32_claimers_fails_no_claim() {
    let store = mariadb_store("backlog", 40).await;
    bodies::purge_of_a_backlog_beside_32_claimers_fails_no_claim(&store.store).await;
}

/// Another session's open transaction that holds the row of `id` in `table` (`SELECT … FOR
/// UPDATE`).
async fn lock_row(table: &str, id: &str) -> sangho_webhook_sqlx::sqlx::mysql::MySqlConnection {
    use sangho_webhook_sqlx::sqlx::{
        self, AssertSqlSafe, Connection, Executor, mysql::MySqlConnection,
    };
    let mut other = MySqlConnection::connect(&common::mariadb_url())
        .await
        .unwrap();
    other.execute("BEGIN").await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT event_id FROM {table} WHERE event_id = ? FOR UPDATE"
    )))
    .bind(id)
    .fetch_one(&mut other)
    .await
    .expect("lock the event's row");
    other
}

/// Ends the transaction of [`lock_row`].
async fn unlock_row(mut other: sangho_webhook_sqlx::sqlx::mysql::MySqlConnection) {
    use sangho_webhook_sqlx::sqlx::{Connection, Executor};
    other.execute("COMMIT").await.unwrap();
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_claim_that_waits_on_a_row_lock_never_lands_after_its_503() {
    let store = mariadb_store("rowlock", 1).await;
    let table = store.table().as_str().to_owned();
    let id = sangho_webhook::testing::conformance::unique_event_id("rowlock");
    bodies::a_claim_that_waits_on_a_lock_never_lands_after_its_503(
        store.store.clone(),
        &id,
        (|| lock_row(&table, &id), unlock_row),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_renewal_that_waits_on_a_row_lock_gives_up_after_the_lock_timeout() {
    let store = mariadb_store("renewlock", 2).await;
    let table = store.table().as_str().to_owned();
    let id = sangho_webhook::testing::conformance::unique_event_id("renewlock");
    bodies::a_renewal_that_waits_on_a_lock_gives_up_after_the_lock_timeout(
        store.store.clone(),
        &id,
        (|| lock_row(&table, &id), unlock_row),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn claims_and_renewals_leave_the_session_lock_wait_timeouts_as_they_are() {
    use sangho_webhook::store::{Claimant, IdempotencyStore as _, Renewal};
    use sangho_webhook_sqlx::sqlx;
    let store = mariadb_store("session", 1).await;
    let (before,): (String,) = sqlx::query_as(
        "SELECT CONCAT(@@session.innodb_lock_wait_timeout, ' ', @@session.lock_wait_timeout)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let id = sangho_webhook::testing::conformance::unique_event_id("session");
    let token = acquire(&*store, &id, LONG).await;
    assert_eq!(
        store
            .renew(Claimant::new(&id, common::TYPE, &token), LONG)
            .await
            .unwrap(),
        Renewal::Held
    );
    let (after,): (String,) = sqlx::query_as(
        "SELECT CONCAT(@@session.innodb_lock_wait_timeout, ' ', @@session.lock_wait_timeout)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(after, before, "the session's own settings");
    assert_ne!(after, "2 2", "not the statements' lock timeout");
}
