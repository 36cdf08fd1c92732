//! Every refusal, 409, store failure and failed settlement is logged with the event id (when
//! it is known) on the event itself, at its own level, so a filter that turns the layer's
//! `info` span off still shows which event it was.

mod common;

use std::time::Duration;

use common::{FaultyStore, TYPE, builder, layer, logs::Logs, secret};
use http::StatusCode;
use sangho_webhook::{
    store::MokaStore,
    testing::{CountingHandler, Delivery, fixtures, send},
};
use tower::Layer;
use tracing::Level;

fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW)
}

#[tokio::test(flavor = "current_thread")]
async fn a_409_is_logged_at_info_with_the_event_id() {
    let (logs, _guard) = Logs::capture();
    let handler = CountingHandler::new().with_delay(Duration::from_millis(300));
    let service = layer(MokaStore::new()).layer(handler);
    let first = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_409").into_request());
        async move { send(&service, request).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = send(&service, delivery("evt_409").into_request()).await;
    assert_eq!(second.status, StatusCode::CONFLICT);
    first.await.unwrap();
    let logged = logs.find("answering 409");
    assert_eq!(logged.level, Level::INFO);
    assert_eq!(logged.fields["event_id"], "evt_409");
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_failure_is_logged_at_error_with_the_event_id_and_cause() {
    let (logs, _guard) = Logs::capture();
    let service = layer(FaultyStore::down()).layer(CountingHandler::new());
    let answer = send(&service, delivery("evt_503").into_request()).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    let logged = logs.find("idempotency store failed");
    assert_eq!(logged.level, Level::ERROR);
    assert_eq!(logged.fields["event_id"], "evt_503");
    assert!(
        logged.fields["error"].contains("the store is down"),
        "{logged:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_refusal_of_a_verified_event_is_logged_at_warn_with_its_id() {
    let (logs, _guard) = Logs::capture();
    let service = layer(MokaStore::new()).layer(CountingHandler::new());
    let request = delivery("evt_body")
        .with_event_id_header("evt_header")
        .into_request();
    assert_eq!(
        send(&service, request).await.status,
        StatusCode::BAD_REQUEST
    );
    let logged = logs.find("refused");
    assert_eq!(logged.level, Level::WARN);
    assert_eq!(logged.fields["event_id"], "evt_body");
    assert_eq!(logged.fields["reason"], "event_id_mismatch");
}

#[tokio::test(flavor = "current_thread")]
async fn a_refusal_before_verification_is_logged_at_warn_with_its_reason() {
    let (logs, _guard) = Logs::capture();
    let service = layer(MokaStore::new()).layer(CountingHandler::new());
    let request = Delivery::event("evt_x", TYPE).into_request();
    assert_eq!(
        send(&service, request).await.status,
        StatusCode::BAD_REQUEST
    );
    let logged = logs.find("refused");
    assert_eq!(logged.level, Level::WARN);
    assert_eq!(logged.fields["reason"], "malformed_signature");
    assert!(!logged.fields.contains_key("event_id") || logged.fields["event_id"] == "None");
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_handler_is_logged_at_warn_with_the_event_id() {
    let (logs, _guard) = Logs::capture();
    let failing = CountingHandler::new().with_status(StatusCode::INTERNAL_SERVER_ERROR);
    let service = layer(MokaStore::new()).layer(failing);
    send(&service, delivery("evt_fail").into_request()).await;
    let logged = logs.find("releasing the claim");
    assert_eq!(logged.level, Level::WARN);
    assert_eq!(logged.fields["event_id"], "evt_fail");
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_completion_is_logged_with_the_event_id() {
    let (logs, _guard) = Logs::capture();
    let store = FaultyStore::default();
    store.faults.set_completions_fail(true);
    let service = builder(store)
        .with_completion_retry(Duration::ZERO)
        .build()
        .unwrap()
        .layer(CountingHandler::new());
    send(&service, delivery("evt_nocomplete").into_request()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let logged = logs.find("gave up recording");
    assert_eq!(logged.level, Level::ERROR);
    assert_eq!(logged.fields["event_id"], "evt_nocomplete");
}
