//! Drained at shutdown: `SanghoWebhookLayer::drain` waits for the handlers still running and
//! the settlements still owed, up to its deadline, and says what it had to abandon.

mod common;

use std::time::Duration;

use common::{FaultyStore, TYPE, builder, secret};
use http::StatusCode;
use sangho_webhook::{
    store::Claim,
    testing::{CountingHandler, Delivery, fixtures, send},
};
use tower::{Layer, ServiceExt};

fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW)
}

#[tokio::test]
async fn drain_waits_for_a_handler_whose_provider_hung_up() {
    let store = FaultyStore::default();
    let webhooks = builder(store.clone()).build().unwrap();
    let handler = CountingHandler::new().with_delay(Duration::from_millis(800));
    let service = webhooks.layer(handler.clone());
    let hung_up = tokio::time::timeout(
        Duration::from_millis(100),
        service.oneshot(delivery("evt_drain").into_request()),
    )
    .await;
    assert!(hung_up.is_err());

    let drained = webhooks.drain(Duration::from_secs(5)).await;
    assert!(drained.is_complete(), "{drained:?}");
    assert_eq!(store.peek("evt_drain").await, Claim::Completed);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn drain_waits_for_a_completion_retry_until_the_store_is_back() {
    let store = FaultyStore::default();
    store.faults.set_completions_fail(true);
    let webhooks = builder(store.clone()).build().unwrap();
    let service = webhooks.layer(CountingHandler::new());
    let answer = send(&service, delivery("evt_retrying").into_request()).await;
    assert_eq!(answer.status, StatusCode::OK, "the handler's answer");

    let store_back = {
        let store = store.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            store.faults.set_completions_fail(false);
        }
    };
    let (drained, ()) = tokio::join!(webhooks.drain(Duration::from_secs(10)), store_back);
    assert!(drained.is_complete(), "{drained:?}");
    assert_eq!(
        store.peek("evt_retrying").await,
        Claim::Completed,
        "the retry landed before the drain returned"
    );
}

#[tokio::test]
async fn drain_reports_what_is_still_running_at_its_deadline() {
    let store = FaultyStore::default();
    let webhooks = builder(store.clone()).build().unwrap();
    let handler = CountingHandler::new().with_delay(Duration::from_secs(3600));
    let service = webhooks.layer(handler);
    let hung_up = tokio::time::timeout(
        Duration::from_millis(100),
        service.oneshot(delivery("evt_hung").into_request()),
    )
    .await;
    assert!(hung_up.is_err());

    let drained = webhooks.drain(Duration::from_millis(300)).await;
    assert!(!drained.is_complete());
    // The handler, moved to a task of its own when its provider hung up.
    assert_eq!(drained.abandoned(), 1);
}
