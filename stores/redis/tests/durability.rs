//! What survives a server failure: waiting for a replica (`with_replica_wait`) and a restart
//! with the append-only file. Each test starts its own `redis-server` processes on free
//! loopback ports, in their own temporary directories.

mod common;

use std::{
    error::Error as _,
    time::{Duration, Instant},
};

use common::{
    RedisServer,
    deliver::{TYPE, deliver, deliver_until_ok, service},
    proxy::Proxy,
    wait_for_link,
};
use http::StatusCode;
use sangho_webhook::{
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Renewal, StoreError},
    testing::{CountingHandler, conformance::unique_event_id},
};
use sangho_webhook_redis::{RedisStore, ReplicationError};

const LEASE: Duration = Duration::from_secs(30);
/// The replica wait: a replica in sync acknowledges within milliseconds; the margin is for a
/// loaded machine (a CI run). A frozen replica fails each write after this long, under the
/// connection's response timeout of 1 s, so that a refused write fails for the replication.
const WAIT_TIMEOUT: Duration = Duration::from_millis(600);

/// A store on `primary` that waits for one replica.
async fn durable_store(primary: &RedisServer) -> RedisStore {
    durable_store_at(&primary.url()).await
}

async fn durable_store_at(url: &str) -> RedisStore {
    RedisStore::connect(url)
        .await
        .expect("the test's primary answers")
        .with_replica_wait(1, WAIT_TIMEOUT)
}

/// How long the layer retries a failed completion in these tests.
const LAYER_COMPLETION_RETRY: Duration = Duration::from_secs(60);

fn replication_error(error: &StoreError) -> &ReplicationError {
    assert!(matches!(error, StoreError::Backend(_)), "{error:?}");
    error
        .source()
        .and_then(|source| source.downcast_ref::<ReplicationError>())
        .unwrap_or_else(|| panic!("the source is a ReplicationError: {error:?}"))
}

/// With a replica acknowledging, a claim is on the replica as soon as it is answered. With the
/// replica frozen, the claim fails (the layer answers 503) and is released on the primary, so
/// that the next delivery is not refused for a lease; once the replica is back, the event is
/// processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_claim_no_replica_acknowledged_is_refused_and_released() {
    let primary = RedisServer::start().await;
    let replica = RedisServer::start_replica_of(&primary).await;
    let store = durable_store(&primary).await;

    let (id, token) = (unique_event_id("durable"), ClaimToken::generate());
    assert_eq!(
        store
            .claim(Claimant::new(&id, TYPE, &token), LEASE)
            .await
            .unwrap(),
        Claim::Acquired
    );
    assert_eq!(
        replica.get(&store.key(&id)).as_deref(),
        Some(token.as_str()),
        "an acknowledged claim is on the replica when the claim answers"
    );

    replica.pause();
    let id = unique_event_id("unacked");
    let error = store
        .claim(Claimant::new(&id, TYPE, &ClaimToken::generate()), LEASE)
        .await
        .expect_err("a claim no replica acknowledged fails");
    let cause = replication_error(&error);
    assert_eq!((cause.acknowledged(), cause.required()), (0, 1));
    assert_eq!(
        primary.get(&store.key(&id)),
        None,
        "the unacknowledged claim is released"
    );

    let handler = CountingHandler::new();
    let service = service(store, &handler, |layer| layer);
    assert_eq!(
        deliver(&service, &id).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(handler.calls(), 0, "the handler is not called");

    replica.resume();
    wait_for_link(&replica).await;
    deliver_until_ok(&service, &id, Duration::from_secs(10)).await;
    assert_eq!(handler.calls(), 1);
    assert_eq!(deliver(&service, &id).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

/// A completion or a renewal no replica acknowledged fails; the completion, repeated with the
/// same token once the replica is back (as the layer retries it), succeeds and is on the
/// replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_completion_no_replica_acknowledged_fails_until_repeated_with_a_replica() {
    let primary = RedisServer::start().await;
    let replica = RedisServer::start_replica_of(&primary).await;
    let store = durable_store(&primary).await;
    let (id, token) = (unique_event_id("complete"), ClaimToken::generate());
    let who = Claimant::new(&id, TYPE, &token);
    assert_eq!(store.claim(who, LEASE).await.unwrap(), Claim::Acquired);

    replica.pause();
    let error = store
        .renew(who, LEASE)
        .await
        .expect_err("a renewal no replica acknowledged fails");
    replication_error(&error);
    let error = store
        .complete(who, LEASE)
        .await
        .expect_err("a completion no replica acknowledged fails");
    replication_error(&error);

    replica.resume();
    wait_for_link(&replica).await;
    assert_eq!(
        store.complete(who, LEASE).await.unwrap(),
        Completion::Recorded
    );
    let completed = format!("{}{token}", RedisStore::COMPLETED_PREFIX);
    assert_eq!(replica.get(&store.key(&id)), Some(completed));
}

/// Through the layer, a failover in the middle of a completion: the replication link freezes
/// while the handler runs (a proxy between the servers stops forwarding), so the completion
/// (applied on the primary) is not acknowledged and fails; then the primary crashes (SIGKILL)
/// and the replica, which holds the acknowledged claim but not the completion, is promoted,
/// with a new replica of its own. The layer keeps retrying
/// the completion with the same token; the retry lands on the new primary, and the event is
/// processed once. (Without the retry, the completion is lost with the old primary and the
/// event is processed again once the claim's lease runs out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_completion_lost_in_a_failover_is_retried_onto_the_new_primary() {
    let mut primary = RedisServer::start().await;
    let link = Proxy::to_port(primary.port()).await;
    let replica = RedisServer::start_replica_of_port(link.port()).await;
    let proxy = Proxy::to_port(primary.port()).await;
    let store = durable_store_at(&proxy.url()).await;
    let handler = CountingHandler::new().with_delay(Duration::from_millis(500));
    let retry = std::env::var("SANGHO_TEST_COMPLETION_RETRY_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .map_or(LAYER_COMPLETION_RETRY, Duration::from_secs);
    let service = service(store.clone(), &handler, |layer| {
        layer.with_completion_retry(retry)
    });
    let id = unique_event_id("failedover");
    let first = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { deliver(&service, &id).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while handler.calls() == 0 {
        assert!(Instant::now() < deadline, "the handler was not called");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    link.freeze_open_connections();
    assert_eq!(first.await.expect("the delivery").0, StatusCode::OK);

    primary.stop(); // the completion dies with it
    drop(link);
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    proxy.redirect_new_connections(replica.port());
    let promoted = Instant::now();
    let key = store.key(&id);
    assert_eq!(
        replica
            .get(&key)
            .map(|value| value.starts_with(RedisStore::COMPLETED_PREFIX)),
        Some(false),
        "the promoted replica holds the claim, not the completion"
    );
    let _new_replica = RedisServer::start_replica_of(&replica).await;

    let deadline = promoted + Duration::from_secs(30);
    while !replica
        .get(&key)
        .is_some_and(|value| value.starts_with(RedisStore::COMPLETED_PREFIX))
    {
        assert!(
            Instant::now() < deadline,
            "the completion did not reach the new primary within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "completion lost in a failover: the layer's retry recorded it on the new primary {:?} \
         after the promotion",
        promoted.elapsed()
    );
    assert_eq!(deliver(&service, &id).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 1, "processed once");
}

/// The script cache is empty on a new primary: the durable path sends the script's text when
/// the server answers NOSCRIPT.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn durable_scripts_are_sent_again_after_a_script_flush() {
    let primary = RedisServer::start().await;
    let _replica = RedisServer::start_replica_of(&primary).await;
    let store = durable_store(&primary).await;
    let (id, token) = (unique_event_id("flushed"), ClaimToken::generate());
    let who = Claimant::new(&id, TYPE, &token);
    assert_eq!(store.claim(who, LEASE).await.unwrap(), Claim::Acquired);
    primary.command(&["SCRIPT", "FLUSH"]);
    assert_eq!(store.renew(who, LEASE).await.unwrap(), Renewal::Held);
    primary.command(&["SCRIPT", "FLUSH"]);
    assert_eq!(
        store.complete(who, LEASE).await.unwrap(),
        Completion::Recorded
    );
}

/// Completed events survive a crash (SIGKILL) and restart of a server that writes every
/// command to its append-only file before answering (`appendfsync always`), and so does an
/// in-flight claim. (With `appendfsync everysec`, Redis's default for AOF, the last second of
/// writes can be lost in a crash of the machine; a crash of the process alone loses nothing
/// that reached the kernel.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn completed_events_survive_a_restart_with_the_append_only_file() {
    let persistence = std::env::var("SANGHO_TEST_AOF_ARGS")
        .unwrap_or_else(|_| "--appendonly yes --appendfsync always".to_owned());
    let mut args: Vec<&str> = persistence.split_whitespace().collect();
    args.extend(["--save", ""]);
    let mut server = RedisServer::start_with(&args).await;
    let store = RedisStore::connect(server.url()).await.unwrap();
    let handler = CountingHandler::new();
    let service = service(store.clone(), &handler, |layer| layer);
    let ids: Vec<String> = (0..20).map(|_| unique_event_id("aof")).collect();
    for id in &ids {
        assert_eq!(deliver(&service, id).await.0, StatusCode::OK);
    }
    let in_flight = unique_event_id("aofclaim");
    assert_eq!(
        store
            .claim(
                Claimant::new(&in_flight, TYPE, &ClaimToken::generate()),
                LEASE
            )
            .await
            .unwrap(),
        Claim::Acquired
    );
    assert_eq!(handler.calls(), ids.len());

    server.stop(); // SIGKILL
    server.restart().await;

    for id in &ids {
        deliver_until_ok(&service, id, Duration::from_secs(10)).await;
    }
    assert_eq!(
        handler.calls(),
        ids.len(),
        "every completed event is a duplicate after the restart"
    );
    assert_eq!(
        store
            .claim(
                Claimant::new(&in_flight, TYPE, &ClaimToken::generate()),
                LEASE
            )
            .await
            .unwrap(),
        Claim::InFlight,
        "the in-flight claim survived too"
    );
}
