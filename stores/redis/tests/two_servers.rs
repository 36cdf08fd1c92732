//! Two server processes sharing one Redis (`SANGHO_TEST_REDIS_URL`): two independent layers,
//! each over its own connection, behind two real axum servers.

mod common;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::Router;
use common::{PrefixCleanup, redis_url, unique_prefix};
use http::StatusCode;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use sangho_webhook::{
    SanghoWebhookLayer, WebhookBody,
    signature::Secret,
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures},
};
use sangho_webhook_redis::RedisStore;
use tower::Layer as _;

const DELIVERIES: usize = 40;
const PATH: &str = "/webhooks/sangho";

/// Starts one "process": its own connection, its own layer, its own HTTP server.
async fn start_server(prefix: &str, handler: CountingHandler) -> SocketAddr {
    let store = RedisStore::connect(redis_url())
        .await
        .expect("the test Redis answers")
        .with_prefix(prefix);
    let secret = Secret::new(fixtures::SECRET).expect("the fixture secret is not empty");
    let webhooks = SanghoWebhookLayer::builder(secret, store)
        .with_clock(fixtures::fixed_clock)
        .build()
        .expect("valid settings")
        .layer(handler);
    let app = Router::new().route_service(PATH, webhooks);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let address = listener.local_addr().expect("a bound address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

async fn post(
    client: &Client<HttpConnector, WebhookBody>,
    address: SocketAddr,
    delivery: Delivery,
) -> StatusCode {
    let request = delivery
        .with_uri(format!("http://{address}{PATH}"))
        .into_request();
    client
        .request(request)
        .await
        .expect("the server answers")
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn two_servers_sharing_one_redis_process_an_event_once() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    // One handler count across both servers: what matters is how often the event is processed
    // anywhere. The delay keeps the first delivery in flight while the others arrive.
    let handler = CountingHandler::new().with_delay(Duration::from_millis(100));
    let servers = [
        start_server(&prefix, handler.clone()).await,
        start_server(&prefix, handler.clone()).await,
    ];
    let client = Client::builder(TokioExecutor::new()).build_http::<WebhookBody>();
    let secret = Secret::new(fixtures::SECRET).expect("the fixture secret is not empty");
    let delivery = Delivery::event(&unique_event_id("twoserver"), "payment_intent.succeeded")
        .signed(&secret, fixtures::NOW);

    let barrier = Arc::new(tokio::sync::Barrier::new(DELIVERIES));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..DELIVERIES {
        let (client, delivery, barrier) = (client.clone(), delivery.clone(), barrier.clone());
        let address = servers[n % servers.len()];
        tasks.spawn(async move {
            barrier.wait().await;
            post(&client, address, delivery).await
        });
    }
    let mut statuses = Vec::with_capacity(DELIVERIES);
    while let Some(joined) = tasks.join_next().await {
        statuses.push(joined.expect("a delivery task panicked"));
    }

    assert_eq!(
        handler.calls(),
        1,
        "the event is processed exactly once: {statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|status| matches!(*status, StatusCode::OK | StatusCode::CONFLICT)),
        "every delivery is answered 200 or 409: {statuses:?}"
    );
    assert!(statuses.contains(&StatusCode::OK));

    // Redelivered afterwards, to either server: a duplicate.
    for address in servers {
        assert_eq!(
            post(&client, address, delivery.clone()).await,
            StatusCode::OK
        );
    }
    assert_eq!(handler.calls(), 1);
}
