//! `SqliteStore` on temporary files: the conformance suite and the behaviours only a database
//! shows (reopening, purge, a database that cannot be opened, WAL mode). Not ignored: SQLite
//! needs no server.

mod common;

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use common::{LONG, TYPE, acquire, layer, secret, send, sqlite_store, sqlite_store_at};
use http::StatusCode;
use sangho_webhook::{
    store::{Claim, IdempotencyStore},
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures},
};
use sangho_webhook_sqlx::{
    SqliteStore,
    sqlx::{self, AssertSqlSafe, sqlite::SqlitePoolOptions},
};

sangho_webhook::idempotency_store_conformance!(async { sqlite_store(16).await });

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_claims_through_sixteen_connections_acquire_once() {
    let store = Arc::new(sqlite_store(16).await);
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
async fn completed_event_is_a_duplicate_after_the_pool_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("webhooks.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let id = unique_event_id("reopen");
    let token = acquire(&store, &id, LONG).await;
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    store.pool().close().await;
    assert!(
        store.claim(&id, TYPE, LONG).await.is_err(),
        "the old pool is closed"
    );

    let reopened = SqliteStore::connect(&url).await.unwrap();
    reopened.migrate().await.unwrap();
    assert_eq!(
        reopened.claim(&id, TYPE, LONG).await.unwrap(),
        Claim::Completed
    );
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
async fn purge_removes_exactly_old_completions_and_old_abandoned_claims() {
    let store = sqlite_store(4).await;
    let table = store.table().as_str().to_owned();
    let backdate = |id: String| {
        let (pool, table) = (store.pool().clone(), table.clone());
        async move {
            sqlx::query(AssertSqlSafe(format!(
                "UPDATE {table} SET processed_at = strftime('%Y-%m-%d %H:%M:%f', processed_at, '-4 days') WHERE event_id = ?1"
            )))
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
        }
    };
    let insert_seed_row = |id: String, age: &'static str| {
        let (pool, table) = (store.pool().clone(), table.clone());
        async move {
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {table} (event_id, event_type, processed_at) VALUES (?1, ?2, datetime('now', ?3))"
            )))
            .bind(id)
            .bind(TYPE)
            .bind(age)
            .execute(&pool)
            .await
            .unwrap();
        }
    };

    // Removed: a completion four days old, a seed-style row four days old, a claim abandoned
    // four days ago.
    let old = unique_event_id("old");
    let token = acquire(&*store, &old, LONG).await;
    assert!(store.complete(&old, &token, LONG).await.unwrap());
    backdate(old.clone()).await;
    let seed_old = unique_event_id("seedold");
    insert_seed_row(seed_old.clone(), "-4 days").await;
    let abandoned = unique_event_id("abandoned");
    acquire(&*store, &abandoned, Duration::from_millis(10)).await;
    backdate(abandoned.clone()).await;

    // Kept: a recent completion, a recent seed-style row, a live claim (even an old one), a
    // claim abandoned recently (the next delivery takes it over).
    let recent = unique_event_id("recent");
    let token = acquire(&*store, &recent, LONG).await;
    assert!(store.complete(&recent, &token, LONG).await.unwrap());
    let seed_recent = unique_event_id("seednew");
    insert_seed_row(seed_recent.clone(), "+0 seconds").await;
    let live = unique_event_id("live");
    acquire(&*store, &live, LONG).await;
    let live_old = unique_event_id("liveold");
    acquire(&*store, &live_old, LONG).await;
    backdate(live_old.clone()).await;
    let abandoned_recently = unique_event_id("abandonnew");
    acquire(&*store, &abandoned_recently, Duration::from_millis(10)).await;

    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store.purge(Duration::from_secs(72 * 3600)).await.unwrap(),
        3
    );

    let rows: Vec<(String,)> =
        sqlx::query_as(AssertSqlSafe(format!("SELECT event_id FROM {table}")))
            .fetch_all(store.pool())
            .await
            .unwrap();
    let left: BTreeSet<String> = rows.into_iter().map(|(id,)| id).collect();
    assert_eq!(
        left,
        BTreeSet::from([
            recent,
            seed_recent.clone(),
            live,
            live_old,
            abandoned_recently
        ])
    );
    assert_eq!(
        store.purge(Duration::from_secs(72 * 3600)).await.unwrap(),
        0
    );
    // A row written by another tool (no state of its own) counts as completed.
    assert_eq!(
        store.claim(&seed_recent, TYPE, LONG).await.unwrap(),
        Claim::Completed
    );
}

#[tokio::test]
async fn purge_task_purges_until_stopped() {
    let store = sqlite_store(2).await;
    let done = unique_event_id("done");
    let token = acquire(&*store, &done, LONG).await;
    assert!(store.complete(&done, &token, LONG).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;

    // A zero retention: every completed row is old enough.
    let task = store.spawn_purge(Duration::ZERO, Duration::from_millis(50));
    let count = format!("SELECT count(*) FROM {}", store.table());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (rows,): (i64,) = sqlx::query_as(AssertSqlSafe(count.clone()))
            .fetch_one(store.pool())
            .await
            .unwrap();
        if rows == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the task never purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(Duration::from_secs(5), task.stop())
        .await
        .expect("stop returns promptly");
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
    let store = unopenable_store().await;
    let started = Instant::now();
    assert!(store.claim("evt_down", TYPE, LONG).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn unopenable_database_gets_503_without_calling_the_handler() {
    let handler = CountingHandler::new();
    let service = tower::Layer::layer(&layer(unopenable_store().await), handler.clone());
    let delivery = Delivery::event("evt_down", TYPE).signed(&secret(), fixtures::NOW);
    let status = send(service, delivery.into_request()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(handler.calls(), 0);
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
    assert!(first.complete("evt_1", &token, LONG).await.unwrap());
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
