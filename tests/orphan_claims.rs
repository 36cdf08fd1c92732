//! Claim: a claim whose answer comes too late, or whose delivery goes away while claiming, is
//! finished and then released in the background with the layer's token, so that no orphan
//! claim blocks the event for a whole lease.

mod common;

use std::time::Duration;

use common::{FaultyStore, TYPE, builder, secret};
use http::StatusCode;
use sangho_webhook::testing::{CountingHandler, Delivery, fixtures, send};
use tower::{Layer, ServiceExt};

const SECOND: Duration = Duration::from_secs(1);

fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW)
}

#[tokio::test]
async fn a_claim_answered_after_the_store_timeout_does_not_block_the_next_delivery() {
    let store = FaultyStore::default();
    store.faults.set_late_claims(Duration::from_millis(1_500));
    let handler = CountingHandler::new();
    let service = builder(store.clone())
        .with_store_timeout(SECOND)
        .build()
        .unwrap()
        .layer(handler.clone());
    let late = send(&service, delivery("evt_late").into_request()).await;
    assert_eq!(late.status, StatusCode::SERVICE_UNAVAILABLE);

    store.faults.set_late_claims(Duration::ZERO);
    // The late claim is answered 1.5 s after it was sent, and released then.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let next = send(&service, delivery("evt_late").into_request()).await;
    assert_eq!(next.status, StatusCode::OK, "not 409 for a whole lease");
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn a_delivery_dropped_while_claiming_does_not_block_the_next_one() {
    let store = FaultyStore::default();
    store.faults.set_late_claims(3 * SECOND);
    let handler = CountingHandler::new();
    let service = builder(store.clone())
        .build()
        .unwrap()
        .layer(handler.clone());
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        service.clone().oneshot(delivery("evt_gone").into_request()),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the client went away while the claim was pending"
    );

    store.faults.set_late_claims(Duration::ZERO);
    // The claim is answered 3 s after it was sent, and released then.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let next = send(&service, delivery("evt_gone").into_request()).await;
    assert_eq!(next.status, StatusCode::OK, "not 409 for a whole lease");
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn a_claim_applied_after_its_timeout_never_lands_after_its_own_release() {
    let store = FaultyStore::default();
    store
        .faults
        .set_claims_applied_late(Duration::from_millis(1_500));
    let handler = CountingHandler::new();
    let service = builder(store.clone())
        .with_store_timeout(SECOND)
        .build()
        .unwrap()
        .layer(handler.clone());
    let late = send(&service, delivery("evt_lands_late").into_request()).await;
    assert_eq!(late.status, StatusCode::SERVICE_UNAVAILABLE);

    // The claim lands 0.5 s after its 503; the release must come after it, not before.
    store.faults.set_claims_applied_late(Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let next = send(&service, delivery("evt_lands_late").into_request()).await;
    assert_eq!(next.status, StatusCode::OK, "no orphan claim for a lease");
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn failing_open_on_a_late_claim_still_records_the_completion() {
    let store = FaultyStore::default();
    store.faults.set_late_claims(Duration::from_millis(1_500));
    let handler = CountingHandler::new();
    let service = builder(store.clone())
        .with_store_timeout(SECOND)
        .with_fail_open(true)
        .build()
        .unwrap()
        .layer(handler.clone());
    let first = send(&service, delivery("evt_open").into_request()).await;
    assert_eq!(first.status, StatusCode::OK);

    store.faults.set_late_claims(Duration::ZERO);
    let again = send(&service, delivery("evt_open").into_request()).await;
    assert_eq!(
        again.json(),
        serde_json::json!({ "received": true, "duplicate": true })
    );
    assert_eq!(handler.calls(), 1);
}
