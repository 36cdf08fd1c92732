//! The handler's run: detached from the provider's connection, renewed from another task than
//! the handler's, and never overtaken by its own settlement. Through real axum servers on
//! loopback, two of them sharing one store (two instances of one service), with a client that
//! hangs up.

mod common;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Router, routing::post};
use common::{FaultyStore, TYPE, builder, secret};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use sangho_webhook::{
    SanghoWebhookLayer, WebhookBody,
    store::MokaStore,
    testing::{CountingHandler, Delivery, fixtures, send},
};
use tower::Layer;

const SECOND: Duration = Duration::from_secs(1);

fn delivery(id: &str) -> Request<WebhookBody> {
    Delivery::event(id, TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request()
}

/// What a handler did: `effects` counts the runs that started their work, `finished` those
/// that reached their end.
#[derive(Clone, Default)]
struct Effects {
    effects: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
}

impl Effects {
    fn counts(&self) -> (usize, usize) {
        (
            self.effects.load(Ordering::SeqCst),
            self.finished.load(Ordering::SeqCst),
        )
    }
}

/// Serves the webhook route with `webhooks` over `handler` on 127.0.0.1:0.
async fn serve(webhooks: SanghoWebhookLayer, handler: Router) -> SocketAddr {
    let app = handler.route_layer(webhooks);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

/// POSTs `request` to `address`; `None` when the client gave up after `patience`.
async fn post_to(
    address: SocketAddr,
    request: Request<WebhookBody>,
    patience: Duration,
) -> Option<StatusCode> {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let (mut parts, body) = request.into_parts();
    parts.uri = format!("http://{address}{}", parts.uri).parse().unwrap();
    let exchange = async {
        let response = client.request(Request::from_parts(parts, body)).await;
        let response = response.unwrap();
        let status = response.status();
        response.into_body().collect().await.unwrap();
        status
    };
    tokio::time::timeout(patience, exchange).await.ok()
}

/// A handler that starts its effect at once, then works for `work` asynchronously.
fn slow_handler(effects: &Effects, work: Duration) -> Router {
    let effects = effects.clone();
    Router::new().route(
        "/webhooks/sangho",
        post(move || {
            let effects = effects.clone();
            async move {
                effects.effects.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(work).await;
                effects.finished.fetch_add(1, Ordering::SeqCst);
                "ok"
            }
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_times_out_does_not_cut_the_handler_short() {
    let store = Arc::new(MokaStore::new());
    let webhooks = || builder(store.clone()).build().unwrap();
    let effects = Effects::default();
    let first = serve(webhooks(), slow_handler(&effects, 2 * SECOND)).await;
    let second = serve(webhooks(), slow_handler(&effects, 2 * SECOND)).await;

    // The provider's 500 ms timeout ends the first delivery.
    let gave_up = post_to(first, delivery("evt_timeout"), Duration::from_millis(500)).await;
    assert_eq!(gave_up, None, "the provider hung up");
    // Its redelivery, on the other instance, meets the handler still running.
    let redelivery = post_to(second, delivery("evt_timeout"), SECOND).await;
    assert_eq!(redelivery, Some(StatusCode::CONFLICT));

    tokio::time::sleep(2 * SECOND).await;
    assert_eq!(effects.counts(), (1, 1), "the handler ran once, to its end");
    let later = post_to(second, delivery("evt_timeout"), SECOND).await;
    assert_eq!(later, Some(StatusCode::OK));
    assert_eq!(
        effects.counts(),
        (1, 1),
        "the later redelivery is a duplicate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_that_blocks_its_thread_past_the_lease_is_still_renewed() {
    let store = Arc::new(MokaStore::new());
    let webhooks = || builder(store.clone()).with_lease(SECOND).build().unwrap();
    let effects = Effects::default();
    let blocking = {
        let effects = effects.clone();
        Router::new().route(
            "/webhooks/sangho",
            post(move || {
                let effects = effects.clone();
                async move {
                    effects.effects.fetch_add(1, Ordering::SeqCst);
                    // A synchronous client, or CPU work: the worker thread is blocked.
                    std::thread::sleep(3 * SECOND);
                    effects.finished.fetch_add(1, Ordering::SeqCst);
                    "ok"
                }
            }),
        )
    };
    let first = serve(webhooks(), blocking.clone()).await;
    let second = serve(webhooks(), blocking).await;

    let running = tokio::spawn(post_to(first, delivery("evt_blocking"), 10 * SECOND));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Redeliveries to the other instance, across three leases, all meet a live claim.
    for _ in 0..9 {
        let redelivery = post_to(second, delivery("evt_blocking"), 5 * SECOND).await;
        assert_eq!(redelivery, Some(StatusCode::CONFLICT));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(running.await.unwrap(), Some(StatusCode::OK));
    let later = post_to(second, delivery("evt_blocking"), 5 * SECOND).await;
    assert_eq!(later, Some(StatusCode::OK));
    assert_eq!(effects.counts(), (1, 1), "the handler ran once");
}

#[tokio::test]
async fn a_renewal_answered_late_keeps_the_lease_alive() {
    let store = FaultyStore::default();
    store
        .faults
        .set_renewals_answered_late(Duration::from_millis(2_500));
    let handler = CountingHandler::new().with_delay(8 * SECOND);
    let service = builder(store.clone())
        .with_lease(3 * SECOND)
        .build()
        .unwrap()
        .layer(handler.clone());
    let first = tokio::spawn({
        let service = service.clone();
        async move { send(&service, delivery("evt_late_renewal")).await }
    });
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let redelivery = send(&service, delivery("evt_late_renewal")).await;
        assert_eq!(redelivery.status, StatusCode::CONFLICT, "{redelivery:?}");
    }
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn a_renewal_already_sent_when_the_handler_fails_lands_before_the_release() {
    let store = FaultyStore::default();
    store
        .faults
        .set_renewals_applied_late(Duration::from_millis(400));
    // With a 1 s lease, the first renewal is sent at 333 ms and lands at 733 ms; the handler
    // fails at 500 ms, while it is on its way.
    let failing = CountingHandler::new()
        .with_delay(Duration::from_millis(500))
        .with_status(StatusCode::INTERNAL_SERVER_ERROR);
    let service = builder(store.clone())
        .with_lease(SECOND)
        .build()
        .unwrap()
        .layer(failing.clone());
    let answer = send(&service, delivery("evt_resurrected")).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);

    tokio::time::sleep(Duration::from_millis(500)).await;
    let working = CountingHandler::new();
    let service = builder(store.clone())
        .with_lease(SECOND)
        .build()
        .unwrap()
        .layer(working.clone());
    let next = send(&service, delivery("evt_resurrected")).await;
    assert_eq!(
        next.status,
        StatusCode::OK,
        "no claim re-created after its release"
    );
    assert_eq!((failing.calls(), working.calls()), (1, 1));
}

#[tokio::test]
async fn a_transaction_that_does_not_commit_gives_the_claim_back_to_the_renewals() {
    let store = Arc::new(MokaStore::new());
    let calls = Arc::new(AtomicUsize::new(0));
    // The handler's first transaction holds the completion, then rolls back (the hold is
    // dropped); it retries for 3 s, three leases, before it answers.
    let retrying = {
        let calls = calls.clone();
        tower::service_fn(move |request: Request<sangho_webhook::WebhookBody>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let event = request.extensions().get::<sangho_webhook::SanghoEvent>();
                let hold = event.unwrap().claim().unwrap().hold_completion();
                tokio::time::sleep(Duration::from_millis(100)).await;
                drop(hold);
                tokio::time::sleep(3 * SECOND).await;
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            }
        })
    };
    let service = builder(store.clone())
        .with_lease(SECOND)
        .build()
        .unwrap()
        .layer(retrying);
    let first = tokio::spawn({
        let service = service.clone();
        async move { send(&service, delivery("evt_rolled_back")).await }
    });
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let redelivery = send(&service, delivery("evt_rolled_back")).await;
    assert_eq!(redelivery.status, StatusCode::CONFLICT, "the claim is live");
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
