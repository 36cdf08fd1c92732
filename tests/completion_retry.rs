//! Settle: a completion that fails is retried in the background, the claim still renewed, so
//! a store that comes back in time loses nothing.

mod common;

use std::time::Duration;

use common::{FaultyStore, TYPE, builder, logs::Logs, secret};
use http::StatusCode;
use sangho_webhook::testing::{CountingHandler, Delivery, fixtures, send};
use tower::Layer;

fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW)
}

#[tokio::test]
async fn a_store_that_fails_at_completion_and_comes_back_loses_nothing() {
    let store = FaultyStore::default();
    let handler = CountingHandler::new().with_delay(Duration::from_millis(500));
    let service = builder(store.clone())
        .build()
        .unwrap()
        .layer(handler.clone());
    let first = tokio::spawn({
        let (service, request) = (service.clone(), delivery("evt_retry").into_request());
        async move { send(&service, request).await }
    });
    // The store goes down while the handler runs, and is still down when it answers.
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.faults.set_down(true);
    let answered = first.await.unwrap();
    assert_eq!(
        answered.status,
        StatusCode::OK,
        "the handler's answer is returned"
    );

    tokio::time::sleep(Duration::from_secs(1)).await;
    store.faults.set_down(false);
    // Once the store is back, a retry records the completion; meanwhile redeliveries get 409.
    let mut last = None;
    for _ in 0..50 {
        let redelivery = send(&service, delivery("evt_retry").into_request()).await;
        assert!(
            matches!(redelivery.status, StatusCode::OK | StatusCode::CONFLICT),
            "{redelivery:?}"
        );
        if redelivery.status == StatusCode::OK {
            last = Some(redelivery);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let duplicate = last.expect("the completion was recorded within 5 s of the store's return");
    assert_eq!(
        duplicate.json(),
        serde_json::json!({ "received": true, "duplicate": true })
    );
    assert_eq!(handler.calls(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn completion_retries_give_up_at_the_limit_with_an_error() {
    let (logs, _guard) = Logs::capture();
    let store = FaultyStore::default();
    store.faults.set_completions_fail(true);
    let service = builder(store.clone())
        .with_completion_retry(Duration::from_secs(1))
        .build()
        .unwrap()
        .layer(CountingHandler::new());
    let answer = send(&service, delivery("evt_giveup").into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    let retrying = logs.find("retrying in the background");
    assert_eq!(retrying.fields["event_id"], "evt_giveup");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let gave_up = logs.find("gave up recording");
    assert_eq!(gave_up.level, tracing::Level::ERROR);
    assert_eq!(gave_up.fields["event_id"], "evt_giveup");
}
