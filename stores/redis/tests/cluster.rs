//! The store on Redis Cluster: a cluster of three primaries that the test starts itself
//! (`redis-server --cluster-enabled yes` on free loopback ports, in temporary directories,
//! joined with `redis-cli --cluster create`), the whole conformance suite over a cluster
//! connection, and events spread over every node.

#![cfg(feature = "cluster")]

mod common;

use std::{sync::Arc, time::Duration};

use common::{RedisServer, cluster::Cluster};
use sangho_webhook::{
    store::IdempotencyStore,
    testing::{
        CountingHandler,
        conformance::{self, unique_event_id},
    },
};
use sangho_webhook_redis::{RedisStore, redis};

/// Runs every check of the conformance suite ([`conformance::CHECKS`]) at once against
/// `store`, and names the ones that failed.
async fn every_check(store: &Arc<dyn IdempotencyStore>) -> Vec<&'static str> {
    let mut checks = tokio::task::JoinSet::new();
    for &(name, check) in conformance::CHECKS {
        let store = store.clone();
        checks.spawn(async move { (name, tokio::spawn(check(store)).await.is_ok()) });
    }
    let mut failed = Vec::new();
    while let Some(joined) = checks.join_next().await {
        let (check, passed) = joined.expect("a check task");
        if !passed {
            failed.push(check);
        }
    }
    failed
}

fn keys_on(node: &RedisServer) -> i64 {
    match node.command(&["DBSIZE"]) {
        redis::Value::Int(keys) => keys,
        other => panic!("DBSIZE answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server and redis-cli binaries (/usr/bin, or SANGHO_TEST_REDIS_SERVER and SANGHO_TEST_REDIS_CLI): run with --include-ignored"]
async fn the_store_follows_every_rule_on_a_cluster_of_three_primaries() {
    let cluster = Cluster::start().await;
    let store = RedisStore::connect_cluster(cluster.urls())
        .await
        .expect("the test's cluster answers");
    let store: Arc<dyn IdempotencyStore> = Arc::new(store);

    let failed = tokio::time::timeout(Duration::from_secs(300), every_check(&store))
        .await
        .expect("the conformance suite finishes within 300 s on the cluster");
    assert!(
        failed.is_empty(),
        "conformance checks failed on the cluster: {failed:?}"
    );

    // The events were spread over the three primaries: every node took part.
    for node in &cluster.nodes {
        assert!(keys_on(node) > 0, "no event on port {}", node.port());
    }
}

/// Deliveries through the layer over the cluster store: 30 events, each delivered twice, are
/// processed once each, on whichever node owns their slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server and redis-cli binaries (/usr/bin, or SANGHO_TEST_REDIS_SERVER and SANGHO_TEST_REDIS_CLI): run with --include-ignored"]
async fn deliveries_through_the_layer_on_a_cluster_are_processed_once() {
    use common::deliver::{deliver, service};
    use http::StatusCode;

    let cluster = Cluster::start().await;
    let store = RedisStore::connect_cluster(cluster.urls())
        .await
        .expect("the test's cluster answers");
    let handler = CountingHandler::new();
    let service = service(store, &handler, |layer| layer);
    let ids: Vec<String> = (0..30).map(|_| unique_event_id("cluster")).collect();
    for id in ids.iter().chain(&ids) {
        assert_eq!(deliver(&service, id).await.0, StatusCode::OK, "{id}");
    }
    assert_eq!(handler.calls(), ids.len());
    for node in &cluster.nodes {
        assert!(keys_on(node) > 0, "no event on port {}", node.port());
    }
}

/// `with_replica_wait` on a cluster with one replica per primary: `WAIT` runs on the primary
/// that owns the event's key (in the same pipeline as the write), so claims and completions
/// succeed while the replicas acknowledge, and fail with `ReplicationError` while every
/// replica is frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server and redis-cli binaries (/usr/bin, or SANGHO_TEST_REDIS_SERVER and SANGHO_TEST_REDIS_CLI): run with --include-ignored"]
async fn replica_waits_run_on_the_primary_of_each_key() {
    use sangho_webhook::store::{Claim, ClaimToken, Claimant, Completion, StoreError};
    use sangho_webhook_redis::ReplicationError;
    use std::error::Error as _;

    use sangho_webhook::testing::fixtures::EVENT_TYPE as TYPE;
    let lease = Duration::from_secs(30);
    let cluster = Cluster::start_with_replicas(1).await;
    assert_eq!(cluster.replicas().len(), 3);
    let connected = RedisStore::connect_cluster(cluster.urls())
        .await
        .expect("the test's cluster answers");
    // Replicas in sync acknowledge within milliseconds; the wait allows a loaded machine 800 ms,
    // under the connection's response timeout of 1 s. With every replica frozen, each claim
    // fails after the shorter wait.
    let store = connected
        .clone()
        .with_replica_wait(1, Duration::from_millis(800));
    let frozen = connected.with_replica_wait(1, Duration::from_millis(300));

    let ids: Vec<String> = (0..12).map(|_| unique_event_id("clwait")).collect();
    for id in &ids {
        let token = ClaimToken::generate();
        let who = Claimant::new(id, TYPE, &token);
        assert_eq!(
            store.claim(who, lease).await.unwrap(),
            Claim::Acquired,
            "{id}"
        );
        assert_eq!(
            store.complete(who, lease).await.unwrap(),
            Completion::Recorded,
            "{id}"
        );
    }

    let replicas = cluster.replicas();
    for replica in &replicas {
        replica.pause();
    }
    for id in ids.iter().map(|id| format!("{id}x")) {
        let error = frozen
            .claim(Claimant::new(&id, TYPE, &ClaimToken::generate()), lease)
            .await
            .expect_err("no replica acknowledges");
        assert!(matches!(error, StoreError::Backend(_)), "{error:?}");
        let cause = error
            .source()
            .and_then(|source| source.downcast_ref::<ReplicationError>());
        assert!(cause.is_some(), "{id}: {error:?}");
    }
    for replica in &replicas {
        replica.resume();
    }
}

/// Every client connection to the cluster goes through a proxy per node, which each node
/// announces as its address. The proxies freeze every open connection (nothing forwarded,
/// nothing closed; new connections pass): the store drops the cluster connection after one
/// response timeout, builds it again, and deliveries are processed again within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server and redis-cli binaries (/usr/bin, or SANGHO_TEST_REDIS_SERVER and SANGHO_TEST_REDIS_CLI): run with --include-ignored"]
async fn a_half_open_cluster_connection_is_replaced_within_seconds() {
    use common::deliver::{deliver, service};
    use http::StatusCode;
    use std::time::Instant;

    let cluster = Cluster::start_behind_proxies().await;
    let config = RedisStore::manager_config()
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_connection_timeout(Some(Duration::from_millis(500)));
    let store = RedisStore::options()
        .manager_config(config)
        .connect_cluster(cluster.urls())
        .await
        .expect("the test's cluster answers through the proxies");
    let connection = store.connection().clone();
    let handler = CountingHandler::new();
    let service = service(store, &handler, |layer| {
        layer.with_store_timeout(Duration::from_secs(30))
    });
    for _ in 0..10 {
        let id = unique_event_id("clbefore");
        assert_eq!(deliver(&service, &id).await.0, StatusCode::OK);
    }

    for proxy in &cluster.proxies {
        proxy.freeze_open_connections();
    }
    let frozen = Instant::now();
    let mut refused = Vec::new();
    let recovery = loop {
        let id = unique_event_id("clfrozen");
        let (status, took) = deliver(&service, &id).await;
        if status == StatusCode::OK {
            break frozen.elapsed();
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{id}");
        assert!(took < Duration::from_secs(5), "a refusal took {took:?}");
        refused.push(id);
        assert!(
            frozen.elapsed() < Duration::from_secs(15),
            "every delivery still refused 15 s later ({} refused): the dead connections are kept",
            refused.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "half-open cluster connections: deliveries processed again {recovery:?} after the \
         freeze, {} refused with 503 meanwhile, {} replacement(s)",
        refused.len(),
        connection.replacements()
    );
    assert!(recovery < Duration::from_secs(5), "{recovery:?}");
    assert!(connection.replacements() >= 1);
    let processed = handler.calls();
    for id in &refused {
        common::deliver::deliver_until_ok(&service, id, Duration::from_secs(10)).await;
    }
    assert_eq!(handler.calls(), processed + refused.len());
}
