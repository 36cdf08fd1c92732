//! `PostgresStore`'s durability, measured on a PostgreSQL server of the test's own (started
//! with `initdb` / `pg_ctl`, see `common/private_postgres.rs`): which statements wait for a
//! disk flush (`pg_stat_wal.wal_sync`), and what survives a crash restart of the server.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx -- --include-ignored` on a
//! machine with PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`, or
//! `SANGHO_TEST_PG_BIN`).

mod common;

use std::time::{Duration, Instant};

use common::{LONG, TYPE, acquire, private_postgres::PrivatePostgres};
use sangho_webhook::{
    store::{ClaimToken, Claimant, IdempotencyStore, Release, Renewal},
    testing::conformance::unique_event_id,
};
use sangho_webhook_sqlx::{
    PostgresStore,
    sqlx::{self, PgPool, postgres::PgPoolOptions},
};

/// Operations per measurement.
const OPERATIONS: i64 = 40;

/// A migrated store over one connection to `server`, and a second pool to read the statistics.
async fn store_on(server: &PrivatePostgres) -> (PostgresStore, PgPool) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&server.url())
        .await
        .expect("the private server is reachable");
    let store = PostgresStore::new(pool);
    store.migrate().await.expect("migrate");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&server.url())
        .await
        .expect("the private server is reachable");
    (store, admin)
}

/// The server's WAL flushes so far (`pg_stat_wal.wal_sync`), once the store's session has
/// reported its statistics.
async fn wal_syncs(store: &PostgresStore, admin: &PgPool) -> i64 {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(store.pool())
        .await
        .expect("force the statistics out");
    // The session reports when it goes idle, right after that statement.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (syncs,): (i64,) = sqlx::query_as("SELECT wal_sync FROM pg_stat_wal")
        .fetch_one(admin)
        .await
        .expect("read pg_stat_wal");
    syncs
}

/// How many WAL flushes `operations` cause.
async fn flushes_of<F: Future<Output = ()>>(
    store: &PostgresStore,
    admin: &PgPool,
    operations: F,
) -> i64 {
    let before = wal_syncs(store, admin).await;
    operations.await;
    let flushes = wal_syncs(store, admin).await - before;
    eprintln!("{flushes} WAL flushes");
    flushes
}

#[tokio::test]
#[ignore = "needs PostgreSQL's server binaries (initdb, pg_ctl): run with --include-ignored"]
async fn claims_and_renewals_are_flushed_to_disk_before_they_answer() {
    let server = PrivatePostgres::start(&["fsync = on", "synchronous_commit = on"]);
    let (store, admin) = store_on(&server).await;
    let ids: Vec<String> = (0..OPERATIONS)
        .map(|_| unique_event_id("durable"))
        .collect();
    let mut tokens = Vec::new();
    let claims = flushes_of(&store, &admin, async {
        for id in &ids {
            tokens.push(acquire(&store, id, LONG).await);
        }
    })
    .await;
    assert!(
        claims >= OPERATIONS,
        "{OPERATIONS} claims flushed the WAL {claims} times"
    );
    let renewals = flushes_of(&store, &admin, async {
        for (id, token) in ids.iter().zip(&tokens) {
            assert_eq!(
                store
                    .renew(Claimant::new(id, TYPE, token), LONG)
                    .await
                    .unwrap(),
                Renewal::Held
            );
        }
    })
    .await;
    assert!(
        renewals >= OPERATIONS,
        "{OPERATIONS} renewals flushed the WAL {renewals} times"
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL's server binaries (initdb, pg_ctl): run with --include-ignored"]
async fn asynchronous_claims_are_not_flushed_before_they_answer() {
    // The WAL writer flushes at most every 10 s: on a slow machine too, the count shows only
    // the statements' own flushes.
    let server = PrivatePostgres::start(&[
        "fsync = on",
        "synchronous_commit = on",
        "wal_writer_delay = 10000",
    ]);
    let (store, admin) = store_on(&server).await;
    let store = store.with_asynchronous_claims(true);
    let claims = flushes_of(&store, &admin, async {
        for _ in 0..OPERATIONS {
            acquire(&store, &unique_event_id("async"), LONG).await;
        }
    })
    .await;
    assert!(
        claims < OPERATIONS / 4,
        "{OPERATIONS} asynchronous claims flushed the WAL {claims} times"
    );
    // The setting was the statement's own: the session's is untouched.
    let (setting,): (String,) = sqlx::query_as("SHOW synchronous_commit")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(setting, "on");
}

#[tokio::test]
#[ignore = "needs PostgreSQL's server binaries (initdb, pg_ctl): run with --include-ignored"]
async fn releases_are_not_flushed_before_they_answer() {
    // The WAL writer flushes at most every 10 s (see above).
    let server = PrivatePostgres::start(&[
        "fsync = on",
        "synchronous_commit = on",
        "wal_writer_delay = 10000",
    ]);
    let (store, admin) = store_on(&server).await;
    let mut claimed = Vec::new();
    for _ in 0..OPERATIONS {
        let id = unique_event_id("release");
        let token = acquire(&store, &id, LONG).await;
        claimed.push((id, token));
    }
    let started = Instant::now();
    let releases = flushes_of(&store, &admin, async {
        for (id, token) in &claimed {
            assert_eq!(
                store.release(Claimant::new(id, TYPE, token)).await.unwrap(),
                Release::Released
            );
        }
    })
    .await;
    assert!(
        releases < OPERATIONS / 4,
        "{OPERATIONS} releases flushed the WAL {releases} times in {:?}",
        started.elapsed()
    );
    // A release changes nothing for another token.
    let id = unique_event_id("release");
    acquire(&store, &id, LONG).await;
    assert_eq!(
        store
            .release(Claimant::new(&id, TYPE, &ClaimToken::generate()))
            .await
            .unwrap(),
        Release::NotHeld
    );
}

/// The pid of the server's WAL writer.
async fn wal_writer_pid(admin: &PgPool) -> i32 {
    let (pid,): (i32,) =
        sqlx::query_as("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'")
            .fetch_one(admin)
            .await
            .expect("the WAL writer");
    pid
}

fn signal(pid: i32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// A delivery through `service`, with a bound.
async fn deliver<S, B>(service: &S, id: &str) -> http::StatusCode
where
    S: tower::Service<http::Request<sangho_webhook::WebhookBody>, Response = http::Response<B>>
        + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let request = sangho_webhook::testing::Delivery::event(id, TYPE)
        .signed(&common::secret(), sangho_webhook::testing::fixtures::NOW)
        .into_request();
    tokio::time::timeout(
        Duration::from_secs(20),
        sangho_webhook::testing::send(service, request),
    )
    .await
    .expect("a delivery is answered within 20 s")
    .status
}

/// A crash restart of PostgreSQL while a handler runs (the claim's commit had not reached
/// the disk through the WAL writer: it is paused, as it is for the moments after any commit):
/// with the default, durable claims, the claim survives, so a redelivery meanwhile is answered
/// 409, the handler's 2xx completes the event, and it runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL's server binaries (initdb, pg_ctl): run with --include-ignored"]
async fn a_database_crash_restart_mid_handler_loses_no_claim_and_doubles_nothing() {
    let server = PrivatePostgres::start(&["fsync = on", "synchronous_commit = on"]);
    let (_, admin) = store_on(&server).await;
    let store = PostgresStore::new(
        PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2))
            .connect(&server.url())
            .await
            .unwrap(),
    );
    let handler = common::GatedHandler::default();
    let service = tower::Layer::layer(&common::layer(store.clone()), handler.service());
    let id = unique_event_id("crash");

    // The WAL writer is paused: only a commit that flushes the WAL itself reaches the disk.
    let wal_writer = wal_writer_pid(&admin).await;
    signal(wal_writer, "-STOP");
    let first = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { deliver(&service, &id).await }
    });
    handler.started().await;

    // The crash (the paused WAL writer is killed with the rest), and the restart.
    server.crash();
    drop(admin);
    server.start_again();

    // A redelivery while the handler still runs: the claim survived.
    assert_eq!(deliver(&service, &id).await, http::StatusCode::CONFLICT);
    assert_eq!(handler.calls(), 1);

    // The handler answers: the event is completed, and a redelivery is a duplicate.
    handler.open();
    assert_eq!(first.await.unwrap(), http::StatusCode::OK);
    assert_eq!(deliver(&service, &id).await, http::StatusCode::OK);
    assert_eq!(handler.calls(), 1, "the handler ran once");
    let (state,): (String,) =
        sqlx::query_as("SELECT state FROM processed_webhook_events WHERE event_id = $1")
            .bind(&id)
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(state, "completed");
}

/// PostgreSQL crashes while the handler runs and is still down when the handler answers 2xx:
/// the layer answers with the handler's response and retries the completion in the background
/// until the database is back (restarted 2 s later), so a redelivery is then a duplicate and
/// the handler ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL's server binaries (initdb, pg_ctl): run with --include-ignored"]
async fn a_completion_during_a_database_crash_is_retried_until_it_is_back() {
    let server = PrivatePostgres::start(&["fsync = on", "synchronous_commit = on"]);
    let (_, admin) = store_on(&server).await;
    drop(admin);
    let store = PostgresStore::new(
        PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(1))
            .connect(&server.url())
            .await
            .unwrap(),
    );
    let handler = common::GatedHandler::default();
    let service = tower::Layer::layer(&common::layer(store.clone()), handler.service());
    let id = unique_event_id("retried");
    let first = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { deliver(&service, &id).await }
    });
    handler.started().await;
    server.crash();
    // The handler answers while the database is down: the provider gets the 2xx.
    handler.open();
    assert_eq!(first.await.unwrap(), http::StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.start_again();

    // Once the completion is retried, a redelivery is a duplicate (409 meanwhile).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match deliver(&service, &id).await {
            http::StatusCode::OK => break,
            status @ (http::StatusCode::CONFLICT | http::StatusCode::SERVICE_UNAVAILABLE)
                if Instant::now() < deadline =>
            {
                eprintln!("redelivery: {status}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => panic!("the completion was never retried: last redelivery {other}"),
        }
    }
    assert_eq!(handler.calls(), 1, "the handler ran once");
}
