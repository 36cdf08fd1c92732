//! Settle: a 2xx completes the claim; a non-2xx, an error or a panic releases it, so that
//! the next delivery processes the event; a provider that hangs up changes none of it.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use common::{FaultyStore, SpyStore, TYPE, builder, layer, secret};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use sangho_webhook::{
    WebhookBody,
    store::{Claim, ClaimToken, Claimant, IdempotencyStore, MokaStore},
    testing::{CountingHandler, Delivery, fixtures, send},
};
use tower::{Layer, ServiceExt};

fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW)
}

#[tokio::test]
async fn non_2xx_answer_releases_the_claim() {
    let store = SpyStore::default();
    let failing = CountingHandler::new().with_status(StatusCode::INTERNAL_SERVER_ERROR);
    let service = layer(store.clone()).layer(failing.clone());
    let answer = send(&service, delivery("evt_500").into_request()).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(store.releases(), 1);

    let working = CountingHandler::new();
    let service = layer(store.clone()).layer(working.clone());
    assert_eq!(
        send(&service, delivery("evt_500").into_request())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!((failing.calls(), working.calls()), (1, 1));
}

#[tokio::test]
async fn inner_error_releases_the_claim() {
    let store = SpyStore::default();
    let erring = tower::service_fn(|_: Request<WebhookBody>| async {
        Err::<Response<Full<Bytes>>, _>(std::io::Error::other("handler failed"))
    });
    let service = layer(store.clone()).layer(erring);
    let result = service.oneshot(delivery("evt_err").into_request()).await;
    assert!(result.is_err(), "the inner error is passed through");
    assert_eq!(store.releases(), 1);
    assert!(matches!(store.peek("evt_err").await, Claim::Acquired));
}

#[tokio::test]
async fn panic_in_the_handler_releases_the_claim_and_answers_500() {
    let store = SpyStore::default();
    let panicking = tower::service_fn(|_: Request<WebhookBody>| async {
        if true {
            panic!("handler panicked");
        }
        Ok::<Response<Full<Bytes>>, std::convert::Infallible>(Response::default())
    });
    let service = layer(store.clone()).layer(panicking);
    let answer = send(&service, delivery("evt_panic").into_request()).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        answer.json(),
        serde_json::json!({ "error": "handler_panicked" })
    );
    assert_eq!(store.releases(), 1);
    assert!(matches!(store.peek("evt_panic").await, Claim::Acquired));
}

#[tokio::test]
async fn a_provider_that_hangs_up_does_not_cancel_the_handler() {
    let store = SpyStore::default();
    let (started, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let slow = {
        let (started, finished) = (started.clone(), finished.clone());
        tower::service_fn(move |_: Request<WebhookBody>| {
            started.fetch_add(1, Ordering::SeqCst);
            let finished = finished.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(600)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::new())))
            }
        })
    };
    let service = layer(store.clone()).layer(slow);
    let hung_up = tokio::time::timeout(
        Duration::from_millis(200),
        service.clone().oneshot(delivery("evt_gone").into_request()),
    )
    .await;
    assert!(hung_up.is_err(), "the client went away before the answer");
    assert_eq!(started.load(Ordering::SeqCst), 1);
    let meanwhile = send(&service, delivery("evt_gone").into_request()).await;
    assert_eq!(
        meanwhile.status,
        StatusCode::CONFLICT,
        "the handler still runs"
    );

    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 1, "it ran to its end");
    assert_eq!(store.releases(), 0);
    let after = send(&service, delivery("evt_gone").into_request()).await;
    assert_eq!(
        after.json(),
        serde_json::json!({ "received": true, "duplicate": true }),
        "its answer completed the event"
    );
    assert_eq!(started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn failed_completion_still_returns_the_handler_response() {
    let handler = CountingHandler::new();
    let store = FaultyStore::default();
    store.faults.set_completions_fail(true);
    let service = layer(store).layer(handler.clone());
    let answer = send(&service, delivery("evt_nocomplete").into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), serde_json::json!({ "received": true }));
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn claim_of_a_crashed_process_is_taken_over_after_its_lease() {
    let store = MokaStore::new();
    // A process claimed the event, then died before completing or releasing it.
    let crashed = store
        .claim(
            Claimant::new("evt_crash", TYPE, &ClaimToken::generate()),
            Duration::from_millis(500),
        )
        .await
        .unwrap();
    assert!(matches!(crashed, Claim::Acquired));

    let handler = CountingHandler::new();
    let service = layer(store).layer(handler.clone());
    let early = send(&service, delivery("evt_crash").into_request()).await;
    assert_eq!(early.status, StatusCode::CONFLICT);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let later = send(&service, delivery("evt_crash").into_request()).await;
    assert_eq!(later.status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn completed_claim_is_kept_for_the_retention() {
    let store = SpyStore::default();
    let handler = CountingHandler::new();
    let service = builder(store.clone())
        .with_lease(Duration::from_secs(1))
        .with_retention(Duration::from_millis(1_300))
        .with_short_retention_allowed(true)
        .build()
        .unwrap()
        .layer(handler.clone());
    assert_eq!(
        send(&service, delivery("evt_keep").into_request())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(store.peek("evt_keep").await, Claim::Completed);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        send(&service, delivery("evt_keep").into_request())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        handler.calls(),
        2,
        "forgotten after the retention, processed again"
    );
}
