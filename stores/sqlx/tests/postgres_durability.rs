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
    store::{ClaimToken, IdempotencyStore},
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
            assert!(store.renew(id, TYPE, token, LONG).await.unwrap());
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
    let server = PrivatePostgres::start(&["fsync = on", "synchronous_commit = on"]);
    let (store, admin) = store_on(&server).await;
    let store = store.with_asynchronous_claims(true);
    let claims = flushes_of(&store, &admin, async {
        for _ in 0..OPERATIONS {
            acquire(&store, &unique_event_id("async"), LONG).await;
        }
    })
    .await;
    // The WAL writer still flushes in the background, every 200 ms at most.
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
    let server = PrivatePostgres::start(&["fsync = on", "synchronous_commit = on"]);
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
            assert!(store.release(id, token).await.unwrap());
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
    assert!(!store.release(&id, &ClaimToken::generate()).await.unwrap());
}
