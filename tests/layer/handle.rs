//! The handle stage: a verified, newly claimed event reaches the handler with its body, and a
//! redelivery after completion does not.

use super::*;

#[tokio::test]
async fn signed_event_is_processed_once_and_completed() {
    let (answer, handler, store) = deliver(event("evt_ok").signed(&secret(), NOW)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), serde_json::json!({ "received": true }));
    assert_eq!(handler.calls(), 1);
    assert_eq!(store.completions(), 1);
    assert_eq!(store.peek("evt_ok").await, Claim::Completed);
}

#[tokio::test]
async fn handler_sees_the_event_and_the_unchanged_body() {
    let delivery = event("evt_seen").signed(&secret(), NOW);
    let sent = delivery.body_bytes().clone();
    let handler = tower::service_fn(move |request: Request<WebhookBody>| {
        let sent = sent.clone();
        async move {
            let event = request.extensions().get::<SanghoEvent>().cloned().unwrap();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, sent, "the handler reads the exact body");
            assert_eq!(event.raw(), &sent);
            assert_eq!((event.id(), event.event_type()), ("evt_seen", TYPE));
            assert_eq!(event.created(), Some(NOW));
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"seen"))))
        }
    });
    let service = layer(MokaStore::new()).layer(handler);
    let answer = send(&service, delivery.into_request()).await;
    assert_eq!(
        (answer.status, &answer.body[..]),
        (StatusCode::OK, &b"seen"[..])
    );
}

#[tokio::test]
async fn redelivery_of_a_completed_event_is_a_duplicate_without_the_handler() {
    let (handler, store) = (CountingHandler::new(), SpyStore::default());
    let service = layer(store).layer(handler.clone());
    let delivery = event("evt_twice").signed(&secret(), NOW);
    assert_eq!(
        send(&service, delivery.clone().into_request()).await.status,
        StatusCode::OK
    );
    let again = send(&service, delivery.into_request()).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        again.json(),
        serde_json::json!({ "received": true, "duplicate": true })
    );
    assert_eq!(handler.calls(), 1);
}
