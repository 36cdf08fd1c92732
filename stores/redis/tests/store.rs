//! The Redis store against the real Redis (`SANGHO_TEST_REDIS_URL`): what it writes, sharing
//! one connection or several, reopening, errors.

mod common;

use std::{error::Error as _, sync::Arc, time::Duration};

use common::{PrefixCleanup, redis_url, unique_prefix};
use sangho_webhook::store::{
    Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, StoreError,
};
use sangho_webhook_redis::{
    HealingConnection, RedisStore,
    redis::{self, AsyncCommands},
};

use sangho_webhook::testing::fixtures::EVENT_TYPE as TYPE;
const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(72 * 3600);

/// A connection of its own (as a process of its own would have).
async fn manager() -> HealingConnection {
    let client = redis::Client::open(redis_url()).expect("a valid test Redis URL");
    HealingConnection::new(client, RedisStore::manager_config())
        .await
        .expect("the test Redis answers")
}

async fn acquire(store: &(impl IdempotencyStore + Sized), id: &str) -> ClaimToken {
    sangho_webhook::testing::conformance::acquire(store, id, LEASE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn keys_hold_the_owner_token_then_the_completed_marker_and_expire() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    let mut raw = manager().await;
    let store = RedisStore::new(raw.clone()).with_prefix(prefix.clone());
    let key = format!("{prefix}evt_keys");
    assert_eq!(store.key("evt_keys"), key);

    let token = acquire(&store, "evt_keys").await;
    let value: Option<String> = raw.get(&key).await.unwrap();
    assert_eq!(
        value.as_deref(),
        Some(token.as_str()),
        "in flight: the owner's token"
    );
    let ttl: i64 = raw.pttl(&key).await.unwrap();
    assert!(
        ttl > 29_000 && ttl <= 30_000,
        "the lease is the TTL: {ttl} ms"
    );

    assert_eq!(
        store
            .complete(Claimant::new("evt_keys", TYPE, &token), RETENTION)
            .await
            .unwrap(),
        Completion::Recorded
    );
    let value: Option<String> = raw.get(&key).await.unwrap();
    let completed = format!("{}{token}", RedisStore::COMPLETED_PREFIX);
    assert_eq!(
        value.as_deref(),
        Some(completed.as_str()),
        "completed: the marker and the completing token"
    );
    let ttl: i64 = raw.pttl(&key).await.unwrap();
    let retention = i64::try_from(RETENTION.as_millis()).unwrap();
    assert!(
        ttl > retention - 60_000 && ttl <= retention,
        "the retention is the TTL: {ttl} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn release_deletes_the_key() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    let mut raw = manager().await;
    let store = RedisStore::new(raw.clone()).with_prefix(prefix.clone());

    let token = acquire(&store, "evt_release").await;
    assert_eq!(
        store
            .release(Claimant::new("evt_release", TYPE, &token))
            .await
            .unwrap(),
        Release::Released
    );
    let exists: bool = raw.exists(store.key("evt_release")).await.unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn the_default_prefix_is_sangho_webhook() {
    let store = RedisStore::new(manager().await);
    assert_eq!(store.prefix(), "sangho:webhook:");
    assert_eq!(store.key("evt_1"), "sangho:webhook:evt_1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn prefixes_keep_stores_apart() {
    let (first, second) = (unique_prefix(), unique_prefix());
    let _cleanup = (
        PrefixCleanup::new(redis_url(), first.clone()),
        PrefixCleanup::new(redis_url(), second.clone()),
    );
    let manager = manager().await;
    let one = RedisStore::new(manager.clone()).with_prefix(first);
    let two = RedisStore::new(manager).with_prefix(second);
    acquire(&one, "evt_shared_id").await;
    acquire(&two, "evt_shared_id").await;
}

/// 200 concurrent claims, each through its own `RedisStore` over clones of one shared
/// connection (one multiplexed connection): exactly one acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn concurrent_claims_through_one_shared_manager_acquire_once() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    let manager = manager().await;
    let outcomes = race(200, |_| {
        RedisStore::new(manager.clone()).with_prefix(prefix.clone())
    })
    .await;
    assert_eq!(outcomes, (1, 199));
}

/// 200 concurrent claims spread over 8 connections (as 8 processes would): exactly one
/// acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn concurrent_claims_through_several_managers_acquire_once() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    let mut managers = Vec::new();
    for _ in 0..8 {
        managers.push(manager().await);
    }
    let outcomes = race(200, |n| {
        RedisStore::new(managers[n % managers.len()].clone()).with_prefix(prefix.clone())
    })
    .await;
    assert_eq!(outcomes, (1, 199));
}

/// Claims one event from `n` tasks at once, task `i` through `store(i)`; answers (acquired,
/// in flight).
async fn race(n: usize, store: impl Fn(usize) -> RedisStore) -> (usize, usize) {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (store, barrier) = (store(i), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            store
                .claim(
                    Claimant::new("evt_race", TYPE, &ClaimToken::generate()),
                    LEASE,
                )
                .await
        });
    }
    let (mut acquired, mut in_flight) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("a claim task panicked") {
            Ok(Claim::Acquired) => acquired += 1,
            Ok(Claim::InFlight) => in_flight += 1,
            other => panic!("a concurrent claim answered {other:?}"),
        }
    }
    (acquired, in_flight)
}

/// What one connection recorded, a new one (a restarted process) still sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn completed_event_is_recognised_after_reconnecting() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    {
        let before = RedisStore::connect(redis_url())
            .await
            .unwrap()
            .with_prefix(prefix.clone());
        let token = acquire(&before, "evt_reopened").await;
        assert_eq!(
            before
                .complete(Claimant::new("evt_reopened", TYPE, &token), RETENTION)
                .await
                .unwrap(),
            Completion::Recorded
        );
        acquire(&before, "evt_left_in_flight").await;
    } // the first manager and its connection are gone

    let after = RedisStore::connect(redis_url())
        .await
        .unwrap()
        .with_prefix(prefix);
    assert_eq!(
        after
            .claim(
                Claimant::new("evt_reopened", TYPE, &ClaimToken::generate()),
                LEASE
            )
            .await
            .unwrap(),
        Claim::Completed
    );
    assert_eq!(
        after
            .claim(
                Claimant::new("evt_left_in_flight", TYPE, &ClaimToken::generate()),
                LEASE
            )
            .await
            .unwrap(),
        Claim::InFlight
    );
}

/// The store works over any cloneable async connection, here a plain multiplexed connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn works_over_a_multiplexed_connection() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    let client = redis::Client::open(redis_url()).unwrap();
    let connection = client.get_multiplexed_async_connection().await.unwrap();
    let store = RedisStore::new(connection).with_prefix(prefix);
    let token = acquire(&store, "evt_multiplexed").await;
    assert_eq!(
        store
            .complete(Claimant::new("evt_multiplexed", TYPE, &token), RETENTION)
            .await
            .unwrap(),
        Completion::Recorded
    );
    assert_eq!(
        store
            .claim(
                Claimant::new("evt_multiplexed", TYPE, &ClaimToken::generate()),
                LEASE
            )
            .await
            .unwrap(),
        Claim::Completed
    );
}

/// A Redis error (here: the key holds a hash) is a backend error with the `RedisError` as its
/// source.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn redis_errors_are_backend_errors_keeping_the_source() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    let mut raw = manager().await;
    let store = RedisStore::new(raw.clone()).with_prefix(prefix);
    let _: () = raw
        .hset(store.key("evt_wrongtype"), "field", "value")
        .await
        .unwrap();

    let error = store
        .claim(
            Claimant::new("evt_wrongtype", TYPE, &ClaimToken::generate()),
            LEASE,
        )
        .await
        .expect_err("a claim over a hash fails");
    assert!(matches!(error, StoreError::Backend(_)), "{error:?}");
    let source = error.source().expect("the cause is kept");
    let redis_error = source
        .downcast_ref::<redis::RedisError>()
        .expect("the source is the RedisError");
    assert!(
        redis_error.to_string().contains("WRONGTYPE"),
        "{redis_error}"
    );
}

/// Connecting to a port where nothing listens fails, quickly, instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connecting_to_a_dead_server_fails_in_bounded_time() {
    let url = format!("redis://127.0.0.1:{}", common::free_port());
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), RedisStore::connect(url)).await;
    let outcome = result.expect("connect must not hang");
    let error = outcome.expect_err("nothing listens there");
    assert!(
        error
            .redis_error()
            .is_some_and(redis::RedisError::is_io_error),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
