//! The verify stage, the body: the size limit, declared or streamed, and the checks that refuse
//! a request before any of its body is read.

use super::*;

#[tokio::test]
async fn declared_length_over_the_limit_is_413_before_reading() {
    let polled = Arc::new(AtomicUsize::new(0));
    let body = EndlessBody {
        polled: polled.clone(),
    };
    let request = Request::post("/webhooks/sangho")
        .header(header::CONTENT_LENGTH, 2048)
        .body(body)
        .unwrap();
    let handler = CountingHandler::new();
    let service = builder(MokaStore::new())
        .with_max_body_size(1024)
        .build()
        .unwrap()
        .layer(handler.clone());
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        polled.load(Ordering::SeqCst),
        0,
        "no byte of the body is read"
    );
    assert_eq!(handler.calls(), 0);
}

#[tokio::test]
async fn streamed_body_over_the_limit_is_413_and_cut_off_at_the_limit() {
    let polled = Arc::new(AtomicUsize::new(0));
    let body = EndlessBody {
        polled: polled.clone(),
    };
    // A well-formed, current header: the body is read (and cut off) before it is verified.
    let request = Request::post("/webhooks/sangho")
        .header("sangho-signature", format!("t={NOW},v1={}", "0".repeat(64)))
        .body(body)
        .unwrap();
    let handler = CountingHandler::new();
    let service = builder(MokaStore::new())
        .with_max_body_size(10 * CHUNK)
        .build()
        .unwrap()
        .layer(handler.clone());
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        polled.load(Ordering::SeqCst) <= 11,
        "reading stops at the limit (an endless body was polled {} times)",
        polled.load(Ordering::SeqCst)
    );
    assert_eq!(handler.calls(), 0);
}

#[tokio::test]
async fn body_exactly_at_the_limit_is_accepted() {
    let delivery = event("evt_limit").signed(&secret(), NOW);
    let size = delivery.body_bytes().len();
    let handler = CountingHandler::new();
    let service = builder(MokaStore::new())
        .with_max_body_size(size)
        .build()
        .unwrap()
        .layer(handler.clone());
    assert_eq!(
        send(&service, delivery.clone().into_request()).await.status,
        StatusCode::OK
    );
    let smaller = builder(MokaStore::new())
        .with_max_body_size(size - 1)
        .build()
        .unwrap()
        .layer(handler.clone());
    assert_eq!(
        send(&smaller, delivery.into_request()).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn a_missing_signature_header_is_refused_before_any_of_the_body_is_read() {
    let (request, polled) = endless_request(None);
    let handler = CountingHandler::new();
    let response = layer(MokaStore::new())
        .layer(handler.clone())
        .oneshot(request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        polled.load(Ordering::SeqCst),
        0,
        "no byte of the body is read"
    );
    assert_eq!(handler.calls(), 0);
}

#[tokio::test]
async fn a_stale_timestamp_is_refused_before_any_of_the_body_is_read() {
    let stale = format!("t={},v1={}", NOW - 3600, "0".repeat(64));
    let (request, polled) = endless_request(Some(stale));
    let response = layer(MokaStore::new())
        .layer(CountingHandler::new())
        .oneshot(request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let rejection = response.extensions().get::<Rejection>().unwrap();
    assert_eq!(rejection.kind(), RejectionKind::TimestampOutOfTolerance);
    assert_eq!(
        polled.load(Ordering::SeqCst),
        0,
        "no byte of the body is read"
    );
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_even_without_a_signature() {
    let (mut request, polled) = endless_request(None);
    request
        .headers_mut()
        .insert(header::CONTENT_LENGTH, (2 * 1024 * 1024).into());
    let response = layer(MokaStore::new())
        .layer(CountingHandler::new())
        .oneshot(request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(polled.load(Ordering::SeqCst), 0);
}
