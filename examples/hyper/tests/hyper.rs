//! The hyper example through a real server and a real HTTP client (hyper-util's), and its
//! process stopped by SIGTERM.
//!
//! The process test runs the example's binary, as `cargo run -p sangho-example-hyper` does (see
//! `ExampleProcess`).

use std::net::SocketAddr;

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use sangho_example_hyper as example;
use sangho_examples_support::testing::{ExampleProcess, read_answer, send_raw};
use sangho_webhook::{
    SanghoWebhookLayer, WebhookBody,
    signature::Secret,
    store::MokaStore,
    testing::{CountingHandler, Delivery, fixtures},
};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_sangho-example-hyper");

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

fn layer() -> SanghoWebhookLayer {
    SanghoWebhookLayer::builder(Secret::new(fixtures::SECRET).unwrap(), MokaStore::new())
        .with_clock(fixtures::fixed_clock)
        .build()
        .unwrap()
}

async fn start<A>(app: A) -> Server
where
    A: tower::Service<
            Request<hyper::body::Incoming>,
            Response = http::Response<example::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    A::Future: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(example::serve(listener, app, async {
        let _ = stopped.await;
    }));
    Server { addr, stop, task }
}

async fn send(addr: SocketAddr, request: Request<WebhookBody>) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<WebhookBody>();
    let (mut parts, body) = request.into_parts();
    parts.uri = format!("http://{addr}{}", parts.uri).parse().unwrap();
    let response = client
        .request(Request::from_parts(parts, body))
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn signed(id: &str) -> Delivery {
    let secret = Secret::new(fixtures::SECRET).unwrap();
    Delivery::event(id, "payment_intent.succeeded").signed(&secret, fixtures::NOW)
}

#[tokio::test]
async fn a_signed_event_is_received_then_acknowledged_as_a_duplicate() {
    let server = start(example::app(layer(), tower::service_fn(example::handle))).await;

    let (status, body) = send(server.addr, signed("evt_hyper_1").into_request()).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, r#"{"received":true}"#)
    );

    let (status, body) = send(server.addr, signed("evt_hyper_1").into_request()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#""duplicate":true"#), "{body}");

    server.stop().await;
}

#[tokio::test]
async fn bad_deliveries_and_other_routes_are_refused() {
    let handler = CountingHandler::new();
    let server = start(example::app(layer(), handler.clone())).await;

    let unsigned = Delivery::event("evt_hyper_2", "payment_intent.succeeded").into_request();
    assert_eq!(send(server.addr, unsigned).await.0, StatusCode::BAD_REQUEST);

    let wrong_secret = Delivery::event("evt_hyper_2", "payment_intent.succeeded")
        .signed(&Secret::new("whsec_wrong").unwrap(), fixtures::NOW)
        .into_request();
    let (status, body) = send(server.addr, wrong_secret).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(!body.contains("v1="), "never reveals a signature: {body}");

    let elsewhere = signed("evt_hyper_2").with_uri("/elsewhere").into_request();
    assert_eq!(send(server.addr, elsewhere).await.0, StatusCode::NOT_FOUND);

    let mut get = signed("evt_hyper_2").into_request();
    *get.method_mut() = Method::GET;
    let (status, body) = send(server.addr, get).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body, r#"{"error":"method_not_allowed"}"#);

    assert_eq!(handler.calls(), 0);
    server.stop().await;
}

#[tokio::test]
async fn concurrent_deliveries_of_one_event_reach_the_handler_once() {
    let handler = CountingHandler::new().with_delay(std::time::Duration::from_millis(50));
    let server = start(example::app(layer(), handler.clone())).await;

    let deliveries: Vec<_> = (0..50)
        .map(|_| tokio::spawn(send(server.addr, signed("evt_hyper_burst").into_request())))
        .collect();
    for delivery in deliveries {
        let (status, _) = delivery.await.unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::CONFLICT,
            "{status}"
        );
    }
    assert_eq!(handler.calls(), 1);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_lets_a_request_in_progress_finish() {
    let handler = CountingHandler::new().with_delay(std::time::Duration::from_millis(300));
    let server = start(example::app(layer(), handler.clone())).await;

    let addr = server.addr;
    let slow = tokio::spawn(send(addr, signed("evt_hyper_slow").into_request()));
    // Stop only once the request is in the handler.
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while handler.calls() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the request reaches the handler");
    server.stop().await;

    let (status, _) = slow.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn sigterm_stops_the_example_with_exit_status_0() {
    let mut example =
        ExampleProcess::start(EXAMPLE, &[("SANGHO_WEBHOOK_SECRET", fixtures::SECRET)]);
    let address = example.wait_listening().await;
    // Serving: a delivery signed now (the process runs at the real clock) is processed.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let delivery = Delivery::event("evt_hyper_process", "payment_intent.succeeded")
        .signed(&Secret::new(fixtures::SECRET).unwrap(), now);
    let connection = send_raw(address, delivery.into_request()).await;
    let (status, body) = read_answer(connection).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    example.signal("TERM");
    let status = example.wait(std::time::Duration::from_secs(10)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert!(output.contains("SIGTERM: shutting down"), "{output}");
    assert!(output.contains("stopped: nothing left running"), "{output}");
}
