//! Every response carries the delivery's `Outcome`, one test per outcome; the refusal response
//! can be replaced; the service follows tower's conventions.

mod common;

use std::time::Duration;

use common::{FaultyStore, TYPE, builder, layer, secret};
use http::{StatusCode, header};
use sangho_webhook::{
    Outcome, Rejection, RejectionKind, SanghoWebhook, SanghoWebhookLayer,
    store::{ClaimToken, Claimant, IdempotencyStore, MokaStore},
    testing::{Answer, CountingHandler, Delivery, fixtures, send},
};
use tower::Layer;

fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW)
}

fn outcome(answer: &Answer) -> Outcome {
    *answer
        .extensions
        .get::<Outcome>()
        .expect("every response carries its outcome")
}

#[tokio::test]
async fn a_processed_event_is_processed() {
    let service = layer(MokaStore::new()).layer(CountingHandler::new());
    let answer = send(&service, delivery("evt_o1").into_request()).await;
    assert_eq!(outcome(&answer), Outcome::Processed);
}

#[tokio::test]
async fn a_redelivery_is_a_duplicate() {
    let service = layer(MokaStore::new()).layer(CountingHandler::new());
    send(&service, delivery("evt_o2").into_request()).await;
    let answer = send(&service, delivery("evt_o2").into_request()).await;
    assert_eq!(outcome(&answer), Outcome::Duplicate);
}

#[tokio::test]
async fn a_concurrent_delivery_is_in_flight() {
    let handler = CountingHandler::new().with_delay(Duration::from_millis(300));
    let service = layer(MokaStore::new()).layer(handler);
    let first = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_o3").into_request());
        async move { send(&service, request).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = send(&service, delivery("evt_o3").into_request()).await;
    assert_eq!(outcome(&answer), Outcome::Refused(RejectionKind::InFlight));
    first.await.unwrap();
}

#[tokio::test]
async fn a_bad_signature_is_refused_with_its_kind() {
    let service = layer(MokaStore::new()).layer(CountingHandler::new());
    let unsigned = Delivery::event("evt_o4", TYPE).into_request();
    let answer = send(&service, unsigned).await;
    assert_eq!(
        outcome(&answer),
        Outcome::Refused(RejectionKind::MalformedSignature)
    );
}

#[tokio::test]
async fn a_store_failure_is_store_unavailable() {
    let service = layer(FaultyStore::down()).layer(CountingHandler::new());
    let answer = send(&service, delivery("evt_o5").into_request()).await;
    assert_eq!(
        outcome(&answer),
        Outcome::Refused(RejectionKind::StoreUnavailable)
    );
}

#[tokio::test]
async fn a_non_2xx_handler_answer_is_handler_failed() {
    let failing = CountingHandler::new().with_status(StatusCode::BAD_GATEWAY);
    let service = layer(MokaStore::new()).layer(failing);
    let answer = send(&service, delivery("evt_o6").into_request()).await;
    assert_eq!(outcome(&answer), Outcome::HandlerFailed);
}

#[tokio::test]
async fn a_failed_completion_is_completion_failed() {
    let store = FaultyStore::default();
    store.faults.set_completions_fail(true);
    let service = layer(store).layer(CountingHandler::new());
    let answer = send(&service, delivery("evt_o7").into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(outcome(&answer), Outcome::CompletionFailed);
}

#[tokio::test]
async fn a_completion_after_a_takeover_is_taken_over() {
    let store = FaultyStore::default();
    let handler = CountingHandler::new().with_delay(Duration::from_millis(2_500));
    let service = builder(store.clone())
        .with_lease(Duration::from_secs(1))
        .build()
        .unwrap()
        .layer(handler);
    let running = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_o8").into_request());
        async move { send(&service, request).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.faults.set_down(true);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let other = ClaimToken::generate();
    let lease = Duration::from_secs(60);
    store
        .inner
        .claim(Claimant::new("evt_o8", TYPE, &other), lease)
        .await
        .unwrap();
    store.faults.set_down(false);
    let answer = running.await.unwrap();
    assert_eq!(outcome(&answer), Outcome::TakenOver);
}

#[tokio::test]
async fn a_custom_rejection_response_replaces_the_body_and_keeps_retry_after() {
    let handler = CountingHandler::new().with_delay(Duration::from_millis(300));
    let service = builder(MokaStore::new())
        .with_rejection_response(|rejection: &Rejection| {
            http::Response::builder()
                .status(rejection.status())
                .header(header::CONTENT_TYPE, "text/plain")
                .body(format!("no: {}", rejection.kind()))
                .unwrap()
        })
        .build()
        .unwrap()
        .layer(handler);
    let unsigned = send(&service, Delivery::event("evt_r1", TYPE).into_request()).await;
    assert_eq!(unsigned.status, StatusCode::BAD_REQUEST);
    assert_eq!(unsigned.body, "no: malformed_signature");
    assert_eq!(unsigned.headers[header::CONTENT_TYPE], "text/plain");
    assert_eq!(
        unsigned.extensions.get::<Rejection>().map(Rejection::kind),
        Some(RejectionKind::MalformedSignature)
    );

    let first = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_r2").into_request());
        async move { send(&service, request).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let busy = send(&service, delivery("evt_r2").into_request()).await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert_eq!(busy.body, "no: in_flight");
    assert_eq!(busy.headers[header::RETRY_AFTER], "5");
    first.await.unwrap();
}

#[tokio::test]
async fn a_custom_rejection_response_may_set_its_own_retry_after() {
    let service = builder(FaultyStore::down())
        .with_rejection_response(|rejection: &Rejection| {
            http::Response::builder()
                .status(rejection.status())
                .header(header::RETRY_AFTER, "60")
                .body(String::new())
                .unwrap()
        })
        .build()
        .unwrap()
        .layer(CountingHandler::new());
    let answer = send(&service, delivery("evt_r3").into_request()).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.headers[header::RETRY_AFTER], "60");
}

#[test]
fn the_service_gives_access_to_the_wrapped_service() {
    let layer: SanghoWebhookLayer = SanghoWebhook::<()>::layer(secret(), MokaStore::new());
    let mut service = layer.layer(CountingHandler::new());
    assert_eq!(service.get_ref().calls(), 0);
    assert_eq!(service.get_mut().calls(), 0);
    assert_eq!(service.into_inner().calls(), 0);
}

#[test]
fn the_header_names_are_header_names() {
    let request = Delivery::event("evt_h", TYPE)
        .signed(&secret(), fixtures::NOW)
        .with_event_id_header("evt_h")
        .into_request();
    assert!(
        request
            .headers()
            .contains_key(sangho_webhook::SIGNATURE_HEADER)
    );
    assert_eq!(request.headers()[sangho_webhook::EVENT_ID_HEADER], "evt_h");
}
