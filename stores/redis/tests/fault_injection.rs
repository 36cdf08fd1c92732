//! Fault injection with a real server: the test starts its own `redis-server` (from
//! `/usr/bin/redis-server`, or `SANGHO_TEST_REDIS_SERVER`) on a free port, serves deliveries
//! through the layer over it, kills it, and starts it again on the same port.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use http::StatusCode;
use sangho_webhook::{
    SanghoWebhook, SanghoWebhookLayer,
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_redis::RedisStore;
use tower::Layer as _;

use sangho_webhook::testing::fixtures::{EVENT_TYPE as TYPE, secret};
/// The layer's store timeout in this test.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a refused delivery may take: the store timeout, and some slack.
const REFUSAL_BOUND: Duration = Duration::from_secs(3);

/// Delivers event `id` once; answers the status, the `Retry-After` header and how long it took.
async fn deliver(
    service: &SanghoWebhook<CountingHandler>,
    id: &str,
) -> (StatusCode, Option<String>, Duration) {
    let request = Delivery::event(id, TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    let started = Instant::now();
    let answer = send(service, request).await;
    let retry_after = answer.retry_after().map(str::to_owned);
    (answer.status, retry_after, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn an_outage_costs_503s_and_no_lost_or_duplicated_event() {
    let mut server = RedisServer::start().await;
    let config = RedisStore::manager_config()
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_connection_timeout(Some(Duration::from_millis(500)));
    let store = RedisStore::connect_with_config(server.url(), config)
        .await
        .expect("the test's redis-server answers");
    let handler = CountingHandler::new();
    let service = SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .with_store_timeout(STORE_TIMEOUT)
        .build()
        .expect("valid settings")
        .layer(handler.clone());

    // Redis up: events are processed once.
    let before = unique_event_id("before");
    assert_eq!(deliver(&service, &before).await.0, StatusCode::OK);
    assert_eq!(deliver(&service, &before).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 1);

    // Redis down: every delivery is refused with 503 and Retry-After, in bounded time, and the
    // handler is never called.
    server.stop();
    let during = unique_event_id("during");
    for id in [&during, &during, &before, &during] {
        let (status, retry_after, took) = deliver(&service, id).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{id} during the outage"
        );
        assert!(retry_after.is_some(), "a 503 carries Retry-After");
        assert!(took < REFUSAL_BOUND, "a refusal took {took:?}");
    }
    assert_eq!(
        handler.calls(),
        1,
        "the handler is not called while Redis is down"
    );

    // Redis back on the same port: the same app processes deliveries again once the connection
    // manager has reconnected (the event refused during the outage included), exactly once.
    server.restart().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let (status, _, _) = deliver(&service, &during).await;
        if status != StatusCode::SERVICE_UNAVAILABLE {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "deliveries still refused 20 s after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        status,
        StatusCode::OK,
        "the refused event is processed on its next delivery"
    );
    assert_eq!(
        handler.calls(),
        2,
        "the refused event runs its handler once"
    );
    assert_eq!(deliver(&service, &during).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 2, "and its redelivery is a duplicate");

    let after = unique_event_id("after");
    assert_eq!(deliver(&service, &after).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 3);
}

/// A server that crashes (SIGKILL) while a handler runs, and restarts with its append-only
/// file: the handler's first completion fails; the layer retries it while redeliveries are
/// answered 503 (Redis down) or 409 (the claim survived the restart); the retried completion
/// lands, and the event was processed exactly once. Needs the layer's completion retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_store_that_dies_mid_handler_loses_nothing_and_doubles_nothing() {
    let mut server = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ])
    .await;
    let config = RedisStore::manager_config()
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_connection_timeout(Some(Duration::from_millis(500)));
    let store = RedisStore::connect_with_config(server.url(), config)
        .await
        .expect("the test's redis-server answers");
    let handler = CountingHandler::new().with_delay(Duration::from_millis(500));
    let service = SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .with_store_timeout(STORE_TIMEOUT)
        .with_lease(Duration::from_secs(2))
        .build()
        .expect("valid settings")
        .layer(handler.clone());

    let id = unique_event_id("midway");
    let first = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { deliver(&service, &id).await }
    });
    // Wait until the handler runs (the claim is recorded), then kill Redis under it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while handler.calls() == 0 {
        assert!(Instant::now() < deadline, "the handler was not called");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.stop(); // while the handler runs: its first completion cannot be recorded
    let (status, _, _) = first.await.expect("the delivery task");
    assert_eq!(status, StatusCode::OK, "the handler's answer is returned");

    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart().await;
    // Redeliveries until one is answered 200: the retried completion made it a duplicate.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refused = Vec::new();
    loop {
        let (status, _, _) = deliver(&service, &id).await;
        if status == StatusCode::OK {
            break;
        }
        refused.push(status);
        assert!(
            Instant::now() < deadline,
            "still refused 30 s after Redis came back: {refused:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        handler.calls(),
        1,
        "processed exactly once; redeliveries meanwhile: {refused:?}"
    );
}

/// A handler that runs for several leases runs once: the layer renews its claim, so every
/// redelivery meanwhile is answered 409, and its 2xx completes the event. Needs the layer's
/// lease renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_handler_slower_than_the_lease_runs_once() {
    let server = RedisServer::start().await;
    let store = RedisStore::connect(server.url())
        .await
        .expect("the test's redis-server answers");
    let lease = Duration::from_secs(1);
    let handler = CountingHandler::new().with_delay(lease * 4);
    let service = SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .with_lease(lease)
        .build()
        .expect("valid settings")
        .layer(handler.clone());

    let id = unique_event_id("slow");
    let first = tokio::spawn({
        let (service, id) = (service.clone(), id.clone());
        async move { deliver(&service, &id).await }
    });
    let mut statuses = Vec::new();
    while !first.is_finished() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        statuses.push(deliver(&service, &id).await.0);
        assert!(statuses.len() < 100, "the first delivery never finished");
    }
    assert_eq!(first.await.expect("the first delivery").0, StatusCode::OK);
    assert_eq!(handler.calls(), 1, "redeliveries meanwhile: {statuses:?}");
    assert_eq!(deliver(&service, &id).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 1, "its 2xx completed the event");
}

/// A hung server (frozen with SIGSTOP: the TCP connection stays open, nothing answers): the
/// response timeout turns every delivery into a 503 in bounded time instead of a hang, and
/// once the server answers again deliveries are processed.
///
/// A claim that timed out on the client may still run when the server wakes up (it sat in the
/// socket buffer): the event is then in flight with an owner that never comes, answered 409
/// until the lease expires, and then taken over. Hence the short lease here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_hung_server_costs_503s_in_bounded_time() {
    let server = RedisServer::start().await;
    let config = RedisStore::manager_config()
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_connection_timeout(Some(Duration::from_millis(500)));
    let store = RedisStore::connect_with_config(server.url(), config)
        .await
        .expect("the test's redis-server answers");
    let handler = CountingHandler::new();
    // A store timeout far above the response timeout: the store itself must give up.
    let service = SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .with_store_timeout(Duration::from_secs(30))
        .with_lease(Duration::from_secs(2))
        .build()
        .expect("valid settings")
        .layer(handler.clone());

    assert_eq!(
        deliver(&service, &unique_event_id("before")).await.0,
        StatusCode::OK
    );

    server.pause();
    let during = unique_event_id("hung");
    for _ in 0..3 {
        let (status, _, took) = deliver(&service, &during).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(took < Duration::from_secs(5), "a refusal took {took:?}");
    }
    assert_eq!(handler.calls(), 1);

    server.resume();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, _) = deliver(&service, &during).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(
            matches!(
                status,
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::CONFLICT
            ),
            "{status}"
        );
        assert!(
            Instant::now() < deadline,
            "still refused 20 s after Redis answered again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(handler.calls(), 2);
    assert_eq!(deliver(&service, &during).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 2);
}

/// The completion and release scripts are sent by `EVALSHA`; a server that forgot them (a
/// restart, a `SCRIPT FLUSH`, a failover) gets them loaded again, transparently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn scripts_are_loaded_again_after_a_script_flush() {
    use sangho_webhook::store::{
        Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal,
    };
    use sangho_webhook_redis::redis;

    let server = RedisServer::start().await;
    let store = RedisStore::connect(server.url())
        .await
        .expect("the test's redis-server answers");
    let lease = Duration::from_secs(30);
    let flush = || async {
        let mut connection = store.connection().clone();
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .exec_async(&mut connection)
            .await
            .expect("SCRIPT FLUSH");
    };

    let claim = |token| store.claim(Claimant::new("evt_flush", TYPE, token), lease);
    let token = ClaimToken::generate();
    assert_eq!(claim(&token).await.unwrap(), Claim::Acquired);
    flush().await;
    let who = Claimant::new("evt_flush", TYPE, &token);
    assert_eq!(store.release(who).await.unwrap(), Release::Released);
    let token = ClaimToken::generate();
    assert_eq!(claim(&token).await.unwrap(), Claim::Acquired);
    flush().await;
    let who = Claimant::new("evt_flush", TYPE, &token);
    assert_eq!(store.renew(who, lease).await.unwrap(), Renewal::Held);
    flush().await;
    assert_eq!(
        store.complete(who, lease).await.unwrap(),
        Completion::Recorded
    );
    assert_eq!(
        claim(&ClaimToken::generate()).await.unwrap(),
        Claim::Completed
    );
}
