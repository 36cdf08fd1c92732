//! Every check of the verify stage, and the claim stage's store failures, through
//! `tower::ServiceExt::oneshot`.

mod common;

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use common::{FaultyStore, SpyStore, TYPE, builder, layer, secret};
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use sangho_webhook::{
    Rejection, RejectionKind, SanghoEvent, WebhookBody,
    signature::Secret,
    store::{Claim, IdempotencyStore, MokaStore},
    testing::{Answer, CountingHandler, Delivery, fixtures, send},
};
use tower::{Layer, ServiceExt};

const NOW: i64 = fixtures::NOW;

fn event(id: &str) -> Delivery {
    Delivery::event(id, TYPE)
}

/// Sends `delivery` through a fresh layer over a spy store; answers what came back, the
/// handler and the store.
async fn deliver(delivery: Delivery) -> (Answer, CountingHandler, SpyStore) {
    let (handler, store) = (CountingHandler::new(), SpyStore::default());
    let service = layer(store.clone()).layer(handler.clone());
    let answer = send(&service, delivery.into_request()).await;
    (answer, handler, store)
}

/// Sends `delivery` and checks that it was refused with `kind`, without calling the handler or
/// touching the store.
async fn assert_refused(delivery: Delivery, kind: RejectionKind) {
    let (answer, handler, store) = deliver(delivery).await;
    assert_eq!(answer.status, kind.status(), "{kind:?}");
    assert_eq!(answer.error_code(), kind.code());
    assert_eq!(
        answer.extensions.get::<Rejection>().map(Rejection::kind),
        Some(kind)
    );
    assert_eq!(handler.calls(), 0, "the handler must not run for {kind:?}");
    assert_eq!(
        store.operations(),
        0,
        "the store must not be touched for {kind:?}"
    );
}

fn signed_with_header(id: &str, header: impl FnOnce(&str) -> String) -> Delivery {
    let valid = secret().sign(NOW, event(id).body_bytes());
    event(id).with_signature_header(header(&valid))
}

fn v1_of(header: &str) -> &str {
    header.split_once(",v1=").unwrap().1
}

// --- the happy path -------------------------------------------------------------------------

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

// --- verify: the body limit -------------------------------------------------------------------

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

const CHUNK: usize = 100;

/// An endless body of 100-byte chunks that counts how often it is polled.
struct EndlessBody {
    polled: Arc<AtomicUsize>,
}

impl http_body::Body for EndlessBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.polled.fetch_add(1, Ordering::SeqCst);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            &[b'x'; CHUNK],
        )))))
    }
}

// --- verify: the signature --------------------------------------------------------------------

#[tokio::test]
async fn missing_signature_is_400() {
    assert_refused(event("evt_nosig"), RejectionKind::MalformedSignature).await;
}

#[tokio::test]
async fn unparsable_signature_headers_are_400() {
    for header in [
        "",
        "garbage",
        "t=,v1=00",
        "v1=00",
        "t=1700000000",
        "t=1700000000,v1",
    ] {
        let delivery = event("evt_bad").with_signature_header(header);
        assert_refused(delivery, RejectionKind::MalformedSignature).await;
    }
}

#[tokio::test]
async fn duplicate_timestamp_is_400() {
    let delivery = signed_with_header("evt_twot", |valid| format!("t={NOW},{valid}"));
    assert_refused(delivery, RejectionKind::MalformedSignature).await;
}

#[tokio::test]
async fn two_signature_headers_are_400() {
    let delivery = event("evt_twoh")
        .signed(&secret(), NOW)
        .signed(&secret(), NOW);
    assert_refused(delivery, RejectionKind::MalformedSignature).await;
}

#[tokio::test]
async fn any_of_several_v1_matches() {
    let delivery = signed_with_header("evt_many", |valid| {
        format!(
            "t={NOW},v1={},v0=legacy,{}",
            "0".repeat(64),
            &valid[valid.find("v1").unwrap()..]
        )
    });
    let (answer, handler, _) = deliver(delivery).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn empty_truncated_non_hex_and_uppercase_v1_never_match() {
    let spoilers: [fn(&str) -> String; 5] = [
        |_| String::new(),
        |v1| v1[..63].to_owned(),
        |v1| v1[..32].to_owned(),
        |v1| format!("{}zz", &v1[..62]),
        |v1| v1.to_uppercase(),
    ];
    for spoil in spoilers {
        let delivery = signed_with_header("evt_spoil", |valid| {
            format!("t={NOW},v1={}", spoil(v1_of(valid)))
        });
        assert_refused(delivery, RejectionKind::SignatureMismatch).await;
    }
}

#[tokio::test]
async fn signature_with_another_secret_is_400() {
    let other = Secret::new("whsec_someone_else").unwrap();
    assert_refused(
        event("evt_other").signed(&other, NOW),
        RejectionKind::SignatureMismatch,
    )
    .await;
}

#[tokio::test]
async fn tampered_body_is_400() {
    let header = secret().sign(NOW, event("evt_a").body_bytes());
    let delivery = event("evt_b").with_signature_header(header);
    assert_refused(delivery, RejectionKind::SignatureMismatch).await;
}

#[tokio::test]
async fn old_and_new_secret_are_both_accepted_during_rotation() {
    let (old, new) = (
        Secret::new("whsec_old").unwrap(),
        Secret::new("whsec_new").unwrap(),
    );
    let handler = CountingHandler::new();
    let service = sangho_webhook::SanghoWebhookLayer::builder(old.clone(), MokaStore::new())
        .with_secret(new.clone())
        .with_clock(fixtures::fixed_clock)
        .build()
        .unwrap()
        .layer(handler.clone());
    for (id, secret) in [("evt_old", &old), ("evt_new", &new)] {
        let answer = send(&service, event(id).signed(secret, NOW).into_request()).await;
        assert_eq!(answer.status, StatusCode::OK, "{id}");
    }
    assert_eq!(handler.calls(), 2);
}

#[tokio::test]
async fn timestamps_just_inside_the_tolerance_are_accepted_on_both_sides() {
    for (id, timestamp) in [("evt_past", NOW - 300), ("evt_future", NOW + 300)] {
        let (answer, handler, _) = deliver(event(id).signed(&secret(), timestamp)).await;
        assert_eq!(answer.status, StatusCode::OK, "{id}");
        assert_eq!(handler.calls(), 1);
    }
}

#[tokio::test]
async fn timestamps_just_outside_the_tolerance_are_400_on_both_sides() {
    for timestamp in [NOW - 301, NOW + 301] {
        let delivery = event("evt_stale").signed(&secret(), timestamp);
        assert_refused(delivery, RejectionKind::TimestampOutOfTolerance).await;
    }
}

#[tokio::test]
async fn tolerance_is_configurable() {
    let handler = CountingHandler::new();
    let service = builder(MokaStore::new())
        .with_tolerance(Duration::from_secs(10))
        .build()
        .unwrap()
        .layer(handler.clone());
    let late = send(
        &service,
        event("evt_t").signed(&secret(), NOW - 11).into_request(),
    )
    .await;
    assert_eq!(late.error_code(), "timestamp_out_of_tolerance");
    let fresh = send(
        &service,
        event("evt_t").signed(&secret(), NOW - 10).into_request(),
    )
    .await;
    assert_eq!(fresh.status, StatusCode::OK);
}

#[tokio::test]
async fn refusals_never_reveal_the_expected_signature() {
    let valid = secret().sign(NOW, event("evt_leak").body_bytes());
    let delivery =
        event("evt_leak").with_signature_header(format!("t={NOW},v1={}", "0".repeat(64)));
    let (answer, _, _) = deliver(delivery).await;
    let text = format!(
        "{:?}{}",
        answer.headers,
        String::from_utf8_lossy(&answer.body)
    );
    assert!(!text.contains(v1_of(&valid)));
}

// --- verify: the event ------------------------------------------------------------------------

fn signed_body(body: &str) -> Delivery {
    Delivery::body(body.to_owned()).signed(&secret(), NOW)
}

#[tokio::test]
async fn verified_body_that_is_not_json_is_400() {
    assert_refused(signed_body("not json"), RejectionKind::InvalidJson).await;
}

#[tokio::test]
async fn event_without_string_id_or_type_is_400() {
    for body in [
        r#"{"type":"charge.succeeded"}"#,
        r#"{"id":"evt_1"}"#,
        r#"{"id":42,"type":"charge.succeeded"}"#,
        r#"{"id":"evt_1","type":["x"]}"#,
        r#"[1,2]"#,
    ] {
        assert_refused(signed_body(body), RejectionKind::InvalidEvent).await;
    }
}

#[tokio::test]
async fn event_id_of_50_characters_is_accepted() {
    let id = format!("evt_{}", "a".repeat(46));
    let (answer, handler, _) = deliver(event(&id).signed(&secret(), NOW)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);
}

#[tokio::test]
async fn event_id_of_51_characters_is_400() {
    let id = format!("evt_{}", "a".repeat(47));
    assert_refused(
        event(&id).signed(&secret(), NOW),
        RejectionKind::InvalidEventId,
    )
    .await;
}

#[tokio::test]
async fn event_id_with_slash_dot_or_nothing_is_400() {
    for id in ["evt/1", "evt.1", "", "evt 1", "evt_é"] {
        assert_refused(
            event(id).signed(&secret(), NOW),
            RejectionKind::InvalidEventId,
        )
        .await;
    }
}

#[tokio::test]
async fn event_type_over_100_characters_or_unprintable_is_400() {
    for event_type in [
        "a".repeat(101),
        String::new(),
        "charge\u{7f}succeeded".to_owned(),
        "charge_é".to_owned(),
    ] {
        let delivery = Delivery::event("evt_type", &event_type).signed(&secret(), NOW);
        assert_refused(delivery, RejectionKind::InvalidEventType).await;
    }
    let longest = Delivery::event("evt_type", &"a".repeat(100)).signed(&secret(), NOW);
    assert_eq!(deliver(longest).await.0.status, StatusCode::OK);
}

// --- verify: the deduplication key ------------------------------------------------------------

#[tokio::test]
async fn event_id_header_differing_from_the_body_is_400() {
    let delivery = event("evt_body")
        .signed(&secret(), NOW)
        .with_event_id_header("evt_other");
    assert_refused(delivery, RejectionKind::EventIdMismatch).await;
}

#[tokio::test]
async fn event_id_header_equal_to_the_body_is_accepted() {
    let delivery = event("evt_same")
        .signed(&secret(), NOW)
        .with_event_id_header("evt_same");
    assert_eq!(deliver(delivery).await.0.status, StatusCode::OK);
}

// --- claim: the store failing ----------------------------------------------------------------

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

// --- everything at once ----------------------------------------------------------------------

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

// --- bounded work before trust ---------------------------------------------------------------

/// A request whose body is endless and counts its polls, with `signature` as its header.
fn endless_request(signature: Option<String>) -> (Request<EndlessBody>, Arc<AtomicUsize>) {
    let polled = Arc::new(AtomicUsize::new(0));
    let body = EndlessBody {
        polled: polled.clone(),
    };
    let mut request = Request::post("/webhooks/sangho");
    if let Some(signature) = signature {
        request = request.header("sangho-signature", signature);
    }
    (request.body(body).unwrap(), polled)
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

#[tokio::test]
async fn more_than_eight_v1_entries_are_400_malformed() {
    let nine = signed_with_header("evt_nine", |valid| {
        format!("{valid}{}", format!(",v1={}", "0".repeat(64)).repeat(8))
    });
    assert_refused(nine, RejectionKind::MalformedSignature).await;
    let eight = signed_with_header("evt_eight", |valid| {
        format!("{valid}{}", format!(",v1={}", "0".repeat(64)).repeat(7))
    });
    assert_eq!(deliver(eight).await.0.status, StatusCode::OK);
}

#[tokio::test]
async fn a_huge_header_of_thousands_of_v1_entries_is_400_malformed() {
    let flood = format!("t={NOW}{}", format!(",v1={}", "0".repeat(64)).repeat(6_000));
    assert!(flood.len() > 400_000);
    let delivery = event("evt_flood").with_signature_header(flood);
    assert_refused(delivery, RejectionKind::MalformedSignature).await;
}

// --- tolerant parsing ------------------------------------------------------------------------

#[tokio::test]
async fn a_signed_event_with_optional_fields_of_another_type_is_processed() {
    for (field, value) in [
        ("created", "1764500000.5"),
        ("created", r#""2026-01-01T00:00:00Z""#),
        ("created", "9223372036854775808"),
        ("livemode", "0"),
        ("api_version", "20260101"),
    ] {
        let body = format!(
            r#"{{"id":"evt_odd","type":"{TYPE}","{field}":{value},"data":{{"object":{{}}}}}}"#
        );
        let (answer, handler, _) = deliver(Delivery::body(body).signed(&secret(), NOW)).await;
        assert_eq!(answer.status, StatusCode::OK, "{field}: {value}");
        assert_eq!(handler.calls(), 1, "{field}: {value}");
    }
}

#[tokio::test]
async fn a_body_with_two_ids_is_400_and_leaves_the_store_untouched() {
    let body = format!(r#"{{"id":"evt_a","type":"{TYPE}","id":"evt_b"}}"#);
    assert_refused(
        Delivery::body(body).signed(&secret(), NOW),
        RejectionKind::InvalidEvent,
    )
    .await;
    let body = format!(r#"{{"id":"evt_a","type":"{TYPE}","type":"charge.refunded"}}"#);
    assert_refused(
        Delivery::body(body).signed(&secret(), NOW),
        RejectionKind::InvalidEvent,
    )
    .await;
}

// --- the claim, for stores that join the handler's transaction -------------------------------

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
                assert!(store.renew(event.id(), TYPE, &token, lease).await.unwrap());
                let other = sangho_webhook::store::ClaimToken::generate();
                assert!(!store.renew(event.id(), TYPE, &other, lease).await.unwrap());
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
