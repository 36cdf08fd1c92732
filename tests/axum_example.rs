//! `examples/axum.rs`: the layer sits on the webhook route only, so its neighbours and unknown
//! paths answer as they would without it.
//!
//! The example's file is compiled into this test, so what is tested is what users read.

#[allow(dead_code)]
#[path = "../examples/axum.rs"]
mod example;

mod common;

use common::{TYPE, layer, secret};
use http::{Request, StatusCode};
use http_body_util::Full;
use sangho_webhook::{
    store::MokaStore,
    testing::{Delivery, fixtures, send},
};

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
async fn the_webhook_route_receives_a_signed_event() {
    let app = example::app(layer(MokaStore::new()));
    let delivery = Delivery::event("evt_axum", TYPE).signed(&secret(), fixtures::NOW);
    let answer = send(&app, delivery.into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), serde_json::json!({ "received": true }));
}
