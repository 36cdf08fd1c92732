//! The axum extractors (feature `axum`): `SanghoEvent` and `Event<T>`, with and without the
//! layer.

mod common;

use axum::{Json, Router, routing::post};
use common::{SpyStore, TYPE, layer, secret};
use http::StatusCode;
use sangho_webhook::{
    Event, SanghoEvent,
    store::Claim,
    testing::{Delivery, fixtures, send},
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Charge {
    amount: u64,
}

async fn echo(event: SanghoEvent) -> Json<Value> {
    Json(json!({ "id": event.id() }))
}

async fn charge(Event { event, object }: Event<Charge>) -> Json<Value> {
    Json(json!({ "id": event.id(), "amount": object.amount }))
}

fn charge_delivery(id: &str, object: Value) -> Delivery {
    let body = json!({ "id": id, "type": TYPE, "data": { "object": object } });
    Delivery::body(body.to_string()).signed(&secret(), fixtures::NOW)
}

#[tokio::test]
async fn the_event_extractor_hands_over_the_verified_event() {
    let app = Router::new().route(
        "/webhooks/sangho",
        post(echo).layer(layer(SpyStore::default())),
    );
    let delivery = Delivery::event("evt_x1", TYPE).signed(&secret(), fixtures::NOW);
    let answer = send(&app, delivery.into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), json!({ "id": "evt_x1" }));
}

#[tokio::test]
async fn the_event_extractor_without_the_layer_answers_500_naming_the_layer() {
    let app = Router::new().route("/webhooks/sangho", post(echo));
    let delivery = Delivery::event("evt_x2", TYPE).signed(&secret(), fixtures::NOW);
    let answer = send(&app, delivery.into_request()).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.json()["error"], "webhook_layer_missing");
    let message = answer.json()["message"].as_str().unwrap().to_owned();
    assert!(message.contains("SanghoWebhookLayer"), "{message}");
}

#[tokio::test]
async fn the_typed_extractor_hands_over_data_object() {
    let app = Router::new().route(
        "/webhooks/sangho",
        post(charge).layer(layer(SpyStore::default())),
    );
    let answer = send(
        &app,
        charge_delivery("evt_x3", json!({ "amount": 500 })).into_request(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), json!({ "id": "evt_x3", "amount": 500 }));
}

#[tokio::test]
async fn data_that_does_not_fit_the_type_is_a_500_and_the_claim_is_released() {
    let store = SpyStore::default();
    let app = Router::new().route("/webhooks/sangho", post(charge).layer(layer(store.clone())));
    let misfit = charge_delivery("evt_x4", json!({ "amount": "five" }));
    let answer = send(&app, misfit.into_request()).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.json()["error"], "event_data_mismatch");
    let message = answer.json()["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("Charge") && message.contains("invalid type"),
        "{message}"
    );
    assert_eq!(store.releases(), 1);
    assert_eq!(
        store.peek("evt_x4").await,
        Claim::Acquired,
        "the next delivery processes it"
    );
}

#[tokio::test]
async fn the_typed_extractor_without_the_layer_answers_500_naming_the_layer() {
    let app = Router::new().route("/webhooks/sangho", post(charge));
    let answer = send(
        &app,
        charge_delivery("evt_x5", json!({ "amount": 1 })).into_request(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.json()["error"], "webhook_layer_missing");
}

async fn maybe(event: Option<SanghoEvent>) -> Json<Value> {
    Json(json!({ "id": event.as_ref().map(SanghoEvent::id) }))
}

#[tokio::test]
async fn the_optional_event_extractor_is_some_behind_the_layer_and_none_without_it() {
    let app = Router::new()
        .route("/webhooks/sangho", post(maybe))
        .route_layer(layer(SpyStore::default()))
        .route("/other", post(maybe));
    let delivery = Delivery::event("evt_x9", TYPE).signed(&secret(), fixtures::NOW);
    let behind = send(&app, delivery.into_request()).await;
    assert_eq!(behind.json(), json!({ "id": "evt_x9" }));

    let mut elsewhere = Delivery::event("evt_x9", TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    *elsewhere.uri_mut() = "/other".parse().unwrap();
    let without = send(&app, elsewhere).await;
    assert_eq!(without.status, StatusCode::OK);
    assert_eq!(without.json(), json!({ "id": null }));
}
