//! Handle: the claim is renewed while the handler runs, so a handler slower than its lease
//! still runs once; renewal stops at the maximum processing time.

mod common;

use std::{sync::Arc, time::Duration};

use common::{FaultyStore, SpyStore, TYPE, builder, logs::Logs, peek, secret};
use http::StatusCode;
use sangho_webhook::{
    store::{Claim, ClaimToken, Claimant, IdempotencyStore, MokaStore},
    testing::{CountingHandler, Delivery, fixtures, send},
};
use tower::Layer;

const SECOND: Duration = Duration::from_secs(1);

fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_ten_times_slower_than_its_lease_runs_once() {
    let handler = CountingHandler::new().with_delay(10 * SECOND);
    let service = builder(MokaStore::new())
        .with_lease(SECOND)
        .build()
        .unwrap()
        .layer(handler.clone());
    let first = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_slow").into_request());
        async move { send(&service, request).await }
    });
    // Redeliveries all along the handler's ten seconds are answered 409.
    for _ in 0..19 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let redelivery = send(&service, delivery("evt_slow").into_request()).await;
        assert_eq!(redelivery.status, StatusCode::CONFLICT, "{redelivery:?}");
    }
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    let after = send(&service, delivery("evt_slow").into_request()).await;
    assert_eq!(
        after.json(),
        serde_json::json!({ "received": true, "duplicate": true }),
        "the slow handler's 2xx completed the event"
    );
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn a_handler_within_the_first_renewal_period_is_never_renewed() {
    let store = SpyStore::default();
    let handler = CountingHandler::new().with_delay(Duration::from_millis(100));
    let service = builder(store.clone())
        .with_lease(3 * SECOND)
        .build()
        .unwrap()
        .layer(handler);
    let answer = send(&service, delivery("evt_quick").into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(store.renewals(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_handler_past_the_maximum_processing_time_lets_its_claim_run_out() {
    let (logs, _guard) = Logs::capture();
    let store = Arc::new(MokaStore::new());
    let handler = CountingHandler::new().with_delay(6 * SECOND);
    let service = builder(store.clone())
        .with_lease(SECOND)
        .with_max_processing_time(2 * SECOND)
        .build()
        .unwrap()
        .layer(handler.clone());
    let hung = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_hung").into_request());
        async move { send(&service, request).await }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        peek(&*store, "evt_hung").await,
        Claim::InFlight,
        "still renewed"
    );
    // Renewal stops at 2 s; the last renewal (at about 2 s) runs out a lease later.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let error = logs.find("maximum processing time");
    assert_eq!(error.level, tracing::Level::ERROR);
    assert_eq!(error.fields["event_id"], "evt_hung");
    let redelivery = send(&service, delivery("evt_hung").into_request()).await;
    assert_eq!(redelivery.status, StatusCode::OK);
    assert_eq!(handler.calls(), 2, "the redelivery took the event over");
    hung.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn a_renewal_that_finds_the_claim_taken_over_is_logged_at_error() {
    let (logs, _guard) = Logs::capture();
    let store = FaultyStore::default();
    let handler = CountingHandler::new().with_delay(3 * SECOND);
    let service = builder(store.clone())
        .with_lease(SECOND)
        .build()
        .unwrap()
        .layer(handler);
    let running = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_lost").into_request());
        async move { send(&service, request).await }
    });
    // The store is unreachable for longer than the lease: the renewals fail...
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.faults.set_down(true);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let failed = logs.find("could not renew");
    assert_eq!(failed.level, tracing::Level::ERROR);
    assert_eq!(failed.fields["event_id"], "evt_lost");
    // ...the claim runs out, and another owner takes the event over.
    let other = ClaimToken::generate();
    let taken = store
        .inner
        .claim(Claimant::new("evt_lost", TYPE, &other), 60 * SECOND)
        .await;
    assert_eq!(taken.unwrap(), Claim::Acquired);
    store.faults.set_down(false);
    assert_eq!(running.await.unwrap().status, StatusCode::OK);
    let taken_over = logs.find("taken over");
    assert_eq!(taken_over.level, tracing::Level::ERROR);
    assert_eq!(taken_over.fields["event_id"], "evt_lost");
}

#[tokio::test]
async fn once_the_handlers_transaction_holds_the_completion_the_claim_is_not_renewed() {
    let store = SpyStore::default();
    let holding = tower::service_fn(
        |request: http::Request<sangho_webhook::WebhookBody>| async move {
            let event = request
                .extensions()
                .get::<sangho_webhook::SanghoEvent>()
                .unwrap();
            // What a store's `complete_in` does once the completion is in the transaction.
            let hold = event.claim().unwrap().hold_completion();
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            hold.committed();
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        },
    );
    let service = builder(store.clone())
        .with_lease(SECOND)
        .build()
        .unwrap()
        .layer(holding);
    let answer = send(&service, delivery("evt_held").into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        store.renewals(),
        0,
        "no renewal waits on the transaction's row"
    );
    assert_eq!(store.peek("evt_held").await, Claim::Completed);
}
