//! The main example: the layer sits on the webhook route's `POST` only, so its neighbours,
//! other methods and unknown paths answer as they would without it; the example's binary stops
//! gracefully on SIGTERM and Ctrl-C, and never logs the store's password.
//!
//! The process tests run the example's binary, as `cargo run -p sangho-example-axum` does
//! (see `ExampleProcess`).

use std::time::Duration;

use http::{Request, StatusCode, header};
use http_body_util::Full;
use sangho_example_axum as example;
use sangho_examples_support::testing::{ExampleProcess, SpyStore, layer};
use sangho_webhook::{
    store::MokaStore,
    testing::{
        Delivery,
        fixtures::{self, EVENT_TYPE as TYPE, secret},
        send,
    },
};

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_sangho-example-axum");

fn get(path: &str) -> Request<Full<bytes::Bytes>> {
    Request::get(path).body(Full::default()).unwrap()
}

#[tokio::test]
async fn the_health_check_beside_the_webhook_route_answers_200() {
    let app = example::app(layer(MokaStore::new()));
    assert_eq!(send(&app, get("/health")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn an_unknown_path_answers_404() {
    let app = example::app(layer(MokaStore::new()));
    assert_eq!(
        send(&app, get("/nowhere")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_get_on_the_webhook_route_answers_405_without_the_layer() {
    let store = SpyStore::default();
    let app = example::app(layer(store.clone()));

    let answer = send(&app, get("/webhooks/sangho")).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.headers[header::ALLOW], "POST");

    // Signed, so that only the method is wrong: the layer does not even claim it.
    let mut signed = Delivery::event("evt_axum_get", TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    *signed.method_mut() = http::Method::GET;
    assert_eq!(
        send(&app, signed).await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(store.operations(), 0, "the layer never saw either request");
}

#[tokio::test]
async fn the_webhook_route_receives_a_signed_event() {
    let app = example::app(layer(MokaStore::new()));
    let delivery = Delivery::event("evt_axum", TYPE).signed(&secret(), fixtures::NOW);
    let answer = send(&app, delivery.into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), serde_json::json!({ "received": true }));
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn the_example_never_logs_the_store_password() {
    let port = closed_port();
    for url in [
        format!("postgres://127.0.0.1:{port}/test?user=shop&password=secret"),
        format!("postgres://127.0.0.1:{port}/test?password=secret"),
        format!("postgres://shop:secret@127.0.0.1:{port}/test"),
    ] {
        let mut example = ExampleProcess::start(
            EXAMPLE,
            &[
                ("SANGHO_STORE_URL", &url),
                ("SANGHO_WEBHOOK_SECRET", fixtures::SECRET),
            ],
        );
        let status = example.wait(Duration::from_secs(60)).await;
        let output = example.output();
        assert_eq!(status.code(), Some(1), "the store is unreachable: {output}");
        assert!(!output.contains("secret"), "{url}: {output}");
        assert!(
            output.contains(&format!("store=postgres://127.0.0.1:{port}/test")),
            "the log shows where the store is: {output}"
        );
    }
}

#[tokio::test]
async fn sigterm_stops_the_example_with_exit_status_0() {
    let mut example = ExampleProcess::start(EXAMPLE, &[("SANGHO_STORE_URL", "memory:")]);
    example.wait_listening().await;
    example.signal("TERM");
    let status = example.wait(Duration::from_secs(10)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert!(output.contains("SIGTERM: shutting down"), "{output}");
    assert!(output.contains("stopped: nothing left running"), "{output}");
}

#[tokio::test]
async fn ctrl_c_stops_the_example_with_exit_status_0() {
    let mut example = ExampleProcess::start(EXAMPLE, &[("SANGHO_STORE_URL", "memory:")]);
    example.wait_listening().await;
    example.signal("INT");
    let status = example.wait(Duration::from_secs(10)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert!(output.contains("Ctrl-C: shutting down"), "{output}");
}
