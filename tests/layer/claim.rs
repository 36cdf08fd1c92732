//! The claim stage: an event in flight elsewhere is 409, a failing or hanging store is 503 (or
//! the handler runs when failing open), concurrent deliveries run the handler once, and the
//! handler sees the token its claim holds.

use super::*;

#[tokio::test]
async fn delivery_while_another_is_in_flight_gets_409_with_retry_after() {
    let handler = CountingHandler::new().with_delay(Duration::from_millis(300));
    let service = builder(MokaStore::new())
        .with_retry_after(Duration::from_secs(7))
        .build()
        .unwrap()
        .layer(handler.clone());
    let delivery = event("evt_busy").signed(&secret(), NOW);
    let first = tokio::spawn({
        let (service, request) = (service.clone(), delivery.clone().into_request());
        async move { send(&service, request).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = send(&service, delivery.into_request()).await;
    assert_eq!(second.status, StatusCode::CONFLICT);
    assert_eq!(second.error_code(), "in_flight");
    assert_eq!(second.headers[header::RETRY_AFTER], "7");
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn failing_store_gets_503_with_retry_after_and_no_handler() {
    let handler = CountingHandler::new();
    let service = layer(FaultyStore::down()).layer(handler.clone());
    let answer = send(
        &service,
        event("evt_down").signed(&secret(), NOW).into_request(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.error_code(), "store_unavailable");
    assert_eq!(answer.headers[header::RETRY_AFTER], "5");
    assert_eq!(handler.calls(), 0);
}

#[tokio::test]
async fn hanging_store_gets_503_after_the_store_timeout() {
    let handler = CountingHandler::new();
    let service = builder(FaultyStore::hanging())
        .with_store_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
        .layer(handler.clone());
    let started = std::time::Instant::now();
    let answer = send(
        &service,
        event("evt_hang").signed(&secret(), NOW).into_request(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(handler.calls(), 0);
}

#[tokio::test]
async fn fail_open_calls_the_handler_when_the_store_fails() {
    let handler = CountingHandler::new();
    let service = builder(FaultyStore::down())
        .with_fail_open(true)
        .build()
        .unwrap()
        .layer(handler.clone());
    let answer = send(
        &service,
        event("evt_open").signed(&secret(), NOW).into_request(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_concurrent_deliveries_run_the_handler_once() {
    let handler = CountingHandler::new().with_delay(Duration::from_millis(20));
    let service = layer(MokaStore::new()).layer(handler.clone());
    let delivery = event("evt_storm").signed(&secret(), NOW);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let (service, request) = (service.clone(), delivery.clone().into_request());
        tasks.spawn(async move { send(&service, request).await.status });
    }
    let statuses = tasks.join_all().await;
    assert_eq!(handler.calls(), 1);
    assert!(statuses.contains(&StatusCode::OK));
    assert!(
        statuses
            .iter()
            .all(|s| matches!(*s, StatusCode::OK | StatusCode::CONFLICT))
    );
}

#[tokio::test]
async fn the_handler_sees_the_token_its_claim_holds() {
    let store = std::sync::Arc::new(MokaStore::new());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let handler = {
        let (store, seen) = (store.clone(), seen.clone());
        tower::service_fn(move |request: Request<WebhookBody>| {
            let (store, seen) = (store.clone(), seen.clone());
            async move {
                let event = request.extensions().get::<SanghoEvent>().unwrap().clone();
                let token = *event.claim().expect("the layer sets the claim").token();
                // The token owns the live claim: renewing with it succeeds, another does not.
                let lease = Duration::from_secs(30);
                let renew = |token| store.renew(Claimant::new(event.id(), TYPE, token), lease);
                assert_eq!(renew(&token).await.unwrap(), Renewal::Held);
                let other = sangho_webhook::store::ClaimToken::generate();
                assert_eq!(renew(&other).await.unwrap(), Renewal::TakenOver);
                *seen.lock().unwrap() = Some(token);
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
            }
        })
    };
    let service = layer(store.clone()).layer(handler);
    let answer = send(
        &service,
        event("evt_token").signed(&secret(), NOW).into_request(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(seen.lock().unwrap().is_some());
    assert!(
        SanghoEvent::parse(Bytes::from_static(br#"{"id":"e","type":"t"}"#))
            .unwrap()
            .claim()
            .is_none()
    );
}
