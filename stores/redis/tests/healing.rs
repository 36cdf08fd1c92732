//! The store heals a connection that stopped working without being closed: a half-open
//! connection (a frozen proxy, while new connections work) and a demoted primary answering
//! `READONLY` (a failover behind the configured address). Each test starts its own
//! `redis-server` processes on free loopback ports, behind a TCP proxy of its own.

mod common;

use std::time::{Duration, Instant};

use common::{
    RedisServer,
    deliver::TYPE,
    deliver::{deliver, deliver_until_ok, service},
    proxy::Proxy,
};
use http::StatusCode;
use sangho_webhook::testing::{CountingHandler, conformance::unique_event_id};
use sangho_webhook_redis::RedisStore;

/// The response timeout of the stores here.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long deliveries may be refused after the connection died: the response timeout, the
/// new connection, and slack for a loaded machine.
const RECOVERY_BOUND: Duration = Duration::from_secs(3);

async fn store_through(proxy: &Proxy) -> RedisStore {
    let config = RedisStore::manager_config()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(RESPONSE_TIMEOUT));
    RedisStore::connect_with_config(proxy.url(), config)
        .await
        .expect("the test's redis-server answers through the proxy")
}

/// New events, one every 100 ms, until one is answered 200 (at most 10 s); answers the refused
/// events and the time until the 200.
async fn deliver_new_events_until_ok(
    service: &sangho_webhook::SanghoWebhook<CountingHandler>,
    label: &str,
) -> (Vec<String>, Duration) {
    let started = Instant::now();
    let mut refused = Vec::new();
    loop {
        let id = unique_event_id(label);
        let (status, took) = deliver(service, &id).await;
        if status == StatusCode::OK {
            return (refused, started.elapsed());
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{id}");
        assert!(took < Duration::from_secs(3), "a refusal took {took:?}");
        refused.push(id);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "every delivery still refused 10 s later ({} refused): the dead connection is kept",
            refused.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The proxy between the store and Redis freezes its connection (no byte forwarded, nothing
/// closed), while new connections work: the store gives the connection up after one response
/// timeout and deliveries are processed again within seconds. Every event refused meanwhile
/// is processed exactly once on its redelivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_half_open_connection_is_replaced_within_seconds() {
    let server = RedisServer::start().await;
    let proxy = Proxy::to_port(server.port()).await;
    let store = store_through(&proxy).await;
    let connection = store.connection().clone();
    let handler = CountingHandler::new();
    // A store timeout far above the response timeout: the store itself must give up.
    let service = service(store, &handler, |layer| {
        layer.with_store_timeout(Duration::from_secs(30))
    });
    let before = unique_event_id("before");
    assert_eq!(deliver(&service, &before).await.0, StatusCode::OK);

    proxy.freeze_open_connections();
    let (refused, recovery) = deliver_new_events_until_ok(&service, "halfopen").await;
    eprintln!(
        "half-open connection: deliveries processed again {recovery:?} after the freeze, {} \
         refused with 503 meanwhile",
        refused.len()
    );
    assert!(
        recovery < RECOVERY_BOUND,
        "deliveries refused for {recovery:?}"
    );
    assert_eq!(connection.replacements(), 1, "one connection replaced");
    assert_eq!(proxy.accepted(), 2, "and one new connection opened");

    let processed = handler.calls();
    for id in &refused {
        deliver_until_ok(&service, id, Duration::from_secs(10)).await;
        assert_eq!(deliver(&service, id).await.0, StatusCode::OK);
    }
    assert_eq!(
        handler.calls(),
        processed + refused.len(),
        "each refused event runs its handler once on redelivery"
    );
    assert_eq!(deliver(&service, &before).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), processed + refused.len());
}

/// A failover behind the configured address: the replica is promoted (`REPLICAOF NO ONE`), the
/// old primary demoted to a replica of it, and the address (here a proxy, in production a DNS
/// name, a virtual IP or a service) sends new connections to the new primary. The store's open
/// connection still leads to the old primary, which answers `READONLY`: the store drops it,
/// connects again, and follows. The event completed before the failover (replicated) is still
/// a duplicate afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_promoted_replica_is_followed_after_readonly() {
    let primary = RedisServer::start().await;
    let replica = RedisServer::start_replica_of(&primary).await;
    let proxy = Proxy::to_port(primary.port()).await;
    let store = store_through(&proxy).await.with_prefix("failover:");
    let handler = CountingHandler::new();
    let service = service(store.clone(), &handler, |layer| layer);

    let before = unique_event_id("before");
    assert_eq!(deliver(&service, &before).await.0, StatusCode::OK);
    let key = store.key(&before);
    let deadline = Instant::now() + Duration::from_secs(10);
    while replica.get(&key).is_none() {
        assert!(
            Instant::now() < deadline,
            "the completion did not replicate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    replica.command(&["REPLICAOF", "NO", "ONE"]);
    primary.command(&["REPLICAOF", "127.0.0.1", &replica.port().to_string()]);
    proxy.redirect_new_connections(replica.port());
    let (refused, recovery) = deliver_new_events_until_ok(&service, "failover").await;
    assert_eq!(
        store.connection().replacements(),
        1,
        "the connection to the demoted primary was replaced once"
    );
    eprintln!(
        "failover: deliveries processed again {recovery:?} after the promotion, {} refused \
         with 503 (READONLY) meanwhile",
        refused.len()
    );
    assert!(
        recovery < RECOVERY_BOUND,
        "deliveries refused for {recovery:?}"
    );

    let processed = handler.calls();
    assert_eq!(deliver(&service, &before).await.0, StatusCode::OK);
    assert_eq!(
        handler.calls(),
        processed,
        "the event completed before the failover is a duplicate"
    );
    for id in &refused {
        deliver_until_ok(&service, id, Duration::from_secs(10)).await;
    }
    assert_eq!(handler.calls(), processed + refused.len());
}

/// Every operation on a replica fails with `READONLY`, even one that would only read (a
/// release or a renewal by a token that does not own the event): a demoted primary is noticed
/// by whatever operation reaches it first, and never answers from a replica's possibly stale
/// data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn every_operation_on_a_replica_fails_with_readonly() {
    use sangho_webhook::store::{ClaimToken, Claimant, IdempotencyStore};
    use sangho_webhook_redis::redis::{ErrorKind, RedisError, ServerErrorKind};
    use std::error::Error as _;

    let primary = RedisServer::start().await;
    let replica = RedisServer::start_replica_of(&primary).await;
    let store = RedisStore::connect(replica.url())
        .await
        .expect("the replica answers");
    let (id, token, lease) = (
        "evt_replica",
        ClaimToken::generate(),
        Duration::from_secs(30),
    );
    let read_only = |result: Result<(), sangho_webhook::store::StoreError>| {
        let error = result.expect_err("a replica refuses");
        let kind = error
            .source()
            .and_then(|source| source.downcast_ref::<RedisError>())
            .map(RedisError::kind);
        assert_eq!(
            kind,
            Some(ErrorKind::Server(ServerErrorKind::ReadOnly)),
            "{error:?}"
        );
    };
    let who = Claimant::new(id, TYPE, &token);
    read_only(store.claim(who, lease).await.map(drop));
    read_only(store.renew(who, lease).await.map(drop));
    read_only(store.complete(who, lease).await.map(drop));
    read_only(store.release(who).await.map(drop));
}
