//! `MariaDbStore` (feature `mysql`) against a real MariaDB server: the conformance suite and
//! the behaviours only a database shows.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx --features mysql --
//! --include-ignored`, against `SANGHO_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`). Each test works in a table of its own, dropped when it
//! ends.

mod common;

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use common::{LONG, TYPE, acquire, layer, mariadb_store, mariadb_store_on, secret, send};
use http::StatusCode;
use sangho_webhook::{
    store::{Claim, IdempotencyStore},
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures},
};
use sangho_webhook_sqlx::{
    MariaDbStore,
    sqlx::{self, AssertSqlSafe, mysql::MySqlPoolOptions},
};

sangho_webhook::idempotency_store_conformance!(
    #[ignore = "needs MariaDB: run with --features mysql -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    => async { mariadb_store("conf", 16).await }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB: run with --features mysql -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn two_hundred_concurrent_claims_through_sixteen_connections_acquire_once() {
    let store = Arc::new(mariadb_store("race", 16).await);
    let mut warm = Vec::new();
    for _ in 0..16 {
        warm.push(store.pool().acquire().await.expect("a connection"));
    }
    drop(warm);
    assert_eq!(store.pool().size(), 16);

    let id: Arc<str> = unique_event_id("race").into();
    let barrier = Arc::new(tokio::sync::Barrier::new(200));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            store.claim(&id, TYPE, LONG).await
        });
    }
    let (mut acquired, mut in_flight) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined
            .expect("claim task")
            .expect("no claim fails under concurrency")
        {
            Claim::Acquired(_) => acquired += 1,
            Claim::InFlight => in_flight += 1,
            Claim::Completed => panic!("nothing was completed"),
        }
    }
    assert_eq!((acquired, in_flight), (1, 199));
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mysql -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn event_ids_are_case_sensitive() {
    let store = mariadb_store("case", 2).await;
    let token = acquire(&*store, "evt_Case", LONG).await;
    assert!(store.complete("evt_Case", &token, LONG).await.unwrap());
    acquire(&*store, "evt_case", LONG).await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mysql -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn completed_event_is_a_duplicate_after_the_pool_is_reopened() {
    let store = mariadb_store("reopen", 4).await;
    let id = unique_event_id("reopen");
    let token = acquire(&*store, &id, LONG).await;
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    store.pool().close().await;
    assert!(
        store.claim(&id, TYPE, LONG).await.is_err(),
        "the old pool is closed"
    );

    let reopened = mariadb_store_on(store.table().as_str(), 4).await;
    reopened.migrate().await.unwrap();
    assert_eq!(
        reopened.claim(&id, TYPE, LONG).await.unwrap(),
        Claim::Completed
    );
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --features mysql -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn purge_removes_exactly_old_completions_and_old_abandoned_claims() {
    let store = mariadb_store("purge", 4).await;
    let table = store.table().as_str().to_owned();
    let backdate = |id: String| {
        let (pool, table) = (store.pool().clone(), table.clone());
        async move {
            sqlx::query(AssertSqlSafe(format!(
                "UPDATE {table} SET processed_at = processed_at - INTERVAL 4 DAY WHERE event_id = ?"
            )))
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
        }
    };

    // Removed: a completion four days old, a claim abandoned four days ago.
    let old = unique_event_id("old");
    let token = acquire(&*store, &old, LONG).await;
    assert!(store.complete(&old, &token, LONG).await.unwrap());
    backdate(old.clone()).await;
    let abandoned = unique_event_id("abandoned");
    acquire(&*store, &abandoned, Duration::from_millis(10)).await;
    backdate(abandoned.clone()).await;

    // Kept: a recent completion, a seed-style row, a live claim (even an old one), a claim
    // abandoned recently.
    let recent = unique_event_id("recent");
    let token = acquire(&*store, &recent, LONG).await;
    assert!(store.complete(&recent, &token, LONG).await.unwrap());
    let seed = unique_event_id("seed");
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (event_id, event_type) VALUES (?, ?)"
    )))
    .bind(&seed)
    .bind(TYPE)
    .execute(store.pool())
    .await
    .unwrap();
    let live_old = unique_event_id("liveold");
    acquire(&*store, &live_old, LONG).await;
    backdate(live_old.clone()).await;
    let abandoned_recently = unique_event_id("abandonnew");
    acquire(&*store, &abandoned_recently, Duration::from_millis(10)).await;

    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store.purge(Duration::from_secs(72 * 3600)).await.unwrap(),
        2
    );
    let rows: Vec<(String,)> =
        sqlx::query_as(AssertSqlSafe(format!("SELECT event_id FROM {table}")))
            .fetch_all(store.pool())
            .await
            .unwrap();
    let left: BTreeSet<String> = rows.into_iter().map(|(id,)| id).collect();
    assert_eq!(
        left,
        BTreeSet::from([recent, seed.clone(), live_old, abandoned_recently])
    );
    // A row written by another tool (no state of its own) counts as completed.
    assert_eq!(
        store.claim(&seed, TYPE, LONG).await.unwrap(),
        Claim::Completed
    );
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
    let store = unreachable_store();
    let started = Instant::now();
    assert!(store.claim("evt_down", TYPE, LONG).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(3));

    let handler = CountingHandler::new();
    let service = tower::Layer::layer(&layer(store), handler.clone());
    let delivery = Delivery::event("evt_down", TYPE).signed(&secret(), fixtures::NOW);
    assert_eq!(
        send(service, delivery.into_request()).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(handler.calls(), 0);
}
