//! `PostgresStore` against a real PostgreSQL server: the conformance suite and the behaviours
//! only a database shows (restarts, purge, an unreachable server, replicas sharing a table).
//!
//! Every test is ignored by default: run them with `cargo test -p sangho-webhook-sqlx --
//! --include-ignored`, against `SANGHO_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Each test works in a table of its own, dropped
//! when it ends.

mod common;

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::Router;
use bytes::Bytes;
use common::{LONG, TYPE, acquire, layer, postgres_store, postgres_store_on, secret, send};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use sangho_webhook::{
    store::{Claim, IdempotencyStore, StoreError},
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures},
};
use sangho_webhook_sqlx::{
    PostgresStore,
    sqlx::{self, AssertSqlSafe, postgres::PgPoolOptions},
};

sangho_webhook::idempotency_store_conformance!(
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    => async { postgres_store("conf", 16).await }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn two_hundred_concurrent_claims_through_sixteen_connections_acquire_once() {
    let store = Arc::new(postgres_store("race", 16).await);
    // Open all sixteen connections before the race.
    let warm: Vec<_> = futures_connections(&store, 16).await;
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
    let mut outcomes = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        outcomes.push(joined.expect("claim task").expect("claim"));
    }
    let acquired = outcomes
        .iter()
        .filter(|claim| matches!(claim, Claim::Acquired(_)))
        .count();
    let in_flight = outcomes
        .iter()
        .filter(|claim| **claim == Claim::InFlight)
        .count();
    assert_eq!((acquired, in_flight), (1, 199));

    let rows: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT event_id, state FROM {}",
        store.table()
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(rows, vec![(id.to_string(), "in_flight".to_owned())]);
}

/// Holds `count` connections of the store's pool at once, so that the pool opens them.
async fn futures_connections(
    store: &PostgresStore,
    count: usize,
) -> Vec<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut connections = Vec::new();
    for _ in 0..count {
        connections.push(store.pool().acquire().await.expect("a connection"));
    }
    connections
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn completed_event_is_a_duplicate_after_the_pool_is_reopened() {
    let store = postgres_store("reopen", 4).await;
    let id = unique_event_id("reopen");
    let token = acquire(&*store, &id, LONG).await;
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    store.pool().close().await;
    assert!(
        store.claim(&id, TYPE, LONG).await.is_err(),
        "the old pool is closed"
    );

    let reopened = postgres_store_on(store.table().as_str(), 4).await;
    reopened.migrate().await.unwrap();
    assert_eq!(
        reopened.claim(&id, TYPE, LONG).await.unwrap(),
        Claim::Completed
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn purge_removes_exactly_old_completions_and_old_abandoned_claims() {
    let store = postgres_store("purge", 4).await;
    let table = store.table().as_str().to_owned();
    let backdate = |id: String| {
        let (pool, table) = (store.pool().clone(), table.clone());
        async move {
            sqlx::query(AssertSqlSafe(format!(
                "UPDATE {table} SET processed_at = processed_at - INTERVAL '4 days' WHERE event_id = $1"
            )))
            .bind(id)
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
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (event_id, event_type, processed_at) VALUES ($1, $2, NOW() - INTERVAL '4 days')"
    )))
    .bind(&seed_old)
    .bind(TYPE)
    .execute(store.pool())
    .await
    .unwrap();
    let abandoned = unique_event_id("abandoned");
    acquire(&*store, &abandoned, Duration::from_millis(10)).await;
    backdate(abandoned.clone()).await;

    // Kept: a recent completion, a recent seed-style row, a live claim (even an old one), a
    // claim abandoned recently (the next delivery takes it over).
    let recent = unique_event_id("recent");
    let token = acquire(&*store, &recent, LONG).await;
    assert!(store.complete(&recent, &token, LONG).await.unwrap());
    let seed_recent = unique_event_id("seednew");
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (event_id, event_type) VALUES ($1, $2)"
    )))
    .bind(&seed_recent)
    .bind(TYPE)
    .execute(store.pool())
    .await
    .unwrap();
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
        BTreeSet::from([recent, seed_recent, live, live_old, abandoned_recently])
    );
    assert_eq!(
        store.purge(Duration::from_secs(72 * 3600)).await.unwrap(),
        0
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn purge_task_purges_until_stopped() {
    let store = postgres_store("task", 2).await;
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

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn migrate_upgrades_a_seed_table_and_keeps_its_events() {
    let table = common::unique_table("seed");
    let guard = scopeguard(table.clone());
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&common::postgres_url())
        .await
        .unwrap();
    // The seed's schema and recipe, verbatim but for the names.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {table} (
           event_id     VARCHAR(50)  PRIMARY KEY,
           event_type   VARCHAR(100) NOT NULL,
           processed_at TIMESTAMP    DEFAULT NOW()
         );
         CREATE INDEX {table}_processed_at_idx ON {table} (processed_at);
         INSERT INTO {table} (event_id, event_type)
         VALUES ('evt_seed', 'payment_intent.succeeded') ON CONFLICT (event_id) DO NOTHING;"
    )))
    .execute(&pool)
    .await
    .unwrap();

    let store = PostgresStore::new(pool).with_table_name(&table).unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.expect("migrate runs again");
    let (options,): (Vec<String>,) = sqlx::query_as(
        "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass($1)",
    )
    .bind(&table)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(
        options,
        vec!["fillfactor=70".to_owned()],
        "room for HOT completions"
    );
    assert_eq!(
        store.claim("evt_seed", TYPE, LONG).await.unwrap(),
        Claim::Completed
    );
    acquire(&store, "evt_new", LONG).await;
    drop(guard);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn concurrent_migrations_all_succeed() {
    let table = common::unique_table("migr");
    let _guard = scopeguard(table.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let table = table.clone();
        tasks.spawn(async move {
            let store = postgres_store_on(&table, 1).await;
            store.migrate().await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap().expect("every replica migrates");
    }
}

/// Drops `table` when dropped.
fn scopeguard(table: String) -> impl Drop {
    struct Guard(String);
    impl Drop for Guard {
        fn drop(&mut self) {
            common::drop_table(std::mem::take(&mut self.0));
        }
    }
    Guard(table)
}

/// Unreachable: nothing listens on port 1.
fn unreachable_store() -> PostgresStore {
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    PostgresStore::new(pool)
}

#[tokio::test]
async fn unreachable_database_is_a_store_error_within_the_acquire_timeout() {
    let store = unreachable_store();
    let started = Instant::now();
    let error = store.claim("evt_down", TYPE, LONG).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, StoreError::Timeout(_) | StoreError::Backend(_)),
        "{error:?}"
    );
}

#[tokio::test]
async fn unreachable_database_gets_503_without_calling_the_handler() {
    let handler = CountingHandler::new();
    let service = tower::Layer::layer(&layer(unreachable_store()), handler.clone());
    let delivery = Delivery::event("evt_down", TYPE).signed(&secret(), fixtures::NOW);
    let started = Instant::now();
    let status = send(service, delivery.into_request()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(handler.calls(), 0);
}

/// Serves `handler` behind a layer over its own `PostgresStore` (its own pool) on `table`.
async fn serve(table: &str, handler: CountingHandler) -> SocketAddr {
    let store = PostgresStore::connect(&common::postgres_url())
        .await
        .unwrap()
        .with_table_name(table)
        .unwrap();
    store.migrate().await.unwrap();
    let app = Router::new().route_service(
        "/webhooks/sangho",
        tower::Layer::layer(&layer(store), handler),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn two_servers_sharing_one_database_process_an_event_once() {
    let table = common::unique_table("servers");
    let _guard = scopeguard(table.clone());
    // One handler count across both servers; each server has its own layer and pool.
    let handler = CountingHandler::new().with_delay(Duration::from_millis(200));
    let servers = [
        serve(&table, handler.clone()).await,
        serve(&table, handler.clone()).await,
    ];
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let id = unique_event_id("servers");
    let delivery = Delivery::event(&id, TYPE).signed(&secret(), fixtures::NOW);

    let barrier = Arc::new(tokio::sync::Barrier::new(40));
    let mut tasks = tokio::task::JoinSet::new();
    for attempt in 0..40 {
        let (client, barrier) = (client.clone(), barrier.clone());
        let request = to(servers[attempt % 2], delivery.clone().into_request());
        tasks.spawn(async move {
            barrier.wait().await;
            let response = client.request(request).await.expect("the server answers");
            let status = response.status();
            response.into_body().collect().await.expect("a body");
            status
        });
    }
    let mut statuses = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        statuses.push(joined.unwrap());
    }
    assert_eq!(
        handler.calls(),
        1,
        "exactly one server runs the handler, once"
    );
    assert!(
        statuses
            .iter()
            .all(|status| matches!(*status, StatusCode::OK | StatusCode::CONFLICT)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&StatusCode::OK));

    // Once completed, both servers answer a redelivery as a duplicate.
    for server in servers {
        let response = client
            .request(to(server, delivery.clone().into_request()))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(handler.calls(), 1);
}

/// `request` addressed to `server`.
fn to(server: SocketAddr, request: Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let (mut parts, body) = request.into_parts();
    parts.uri = format!("http://{server}{}", parts.uri).parse().unwrap();
    Request::from_parts(parts, body)
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn asynchronous_claims_leave_the_session_setting_alone() {
    // One connection: the claim, release and the check share it.
    let store = postgres_store("commit", 1).await;
    let (before,): (String,) = sqlx::query_as("SHOW synchronous_commit")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let id = unique_event_id("commit");
    let token = acquire(&*store, &id, LONG).await;
    assert!(store.release(&id, &token).await.unwrap());
    let (after,): (String,) = sqlx::query_as("SHOW synchronous_commit")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(after, before);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn synchronous_claims_follow_the_same_rules() {
    let test_store = postgres_store("sync", 2).await;
    let store = test_store.store.clone().with_synchronous_claims(true);
    let id = unique_event_id("sync");
    let token = acquire(&store, &id, LONG).await;
    assert_eq!(store.claim(&id, TYPE, LONG).await.unwrap(), Claim::InFlight);
    assert!(store.release(&id, &token).await.unwrap());
    let token = acquire(&store, &id, LONG).await;
    assert!(store.complete(&id, &token, LONG).await.unwrap());
    assert_eq!(
        store.claim(&id, TYPE, LONG).await.unwrap(),
        Claim::Completed
    );
}
