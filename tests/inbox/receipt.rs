//! The receipt: what `InboxReceiver` answers, what it stores, and what it never writes.

use std::sync::atomic::Ordering;

use http::{HeaderValue, StatusCode};
use sangho_webhook::{
    ConfigError, Outcome, RejectionKind,
    inbox::{EventState, Inbox, InboxReceiver, MemoryInbox, STORED_HEADERS},
    testing::{Delivery, conformance::unique_event_id, fixtures, send},
};

use crate::support::{FaultyInbox, TYPE, delivery, receiver};

#[tokio::test]
async fn a_new_event_is_stored_and_answered_202() {
    let inbox = MemoryInbox::new();
    let service = receiver(inbox.clone());
    let id = unique_event_id("new");
    let delivery = delivery(&id).with_event_id_header(&id);
    let body = delivery.body_bytes().clone();

    let answer = send(&service, delivery.into_request()).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(answer.json(), serde_json::json!({ "received": true }));
    assert_eq!(answer.extensions.get::<Outcome>(), Some(&Outcome::Stored));

    let record = inbox.show(&id).await.unwrap().expect("the stored event");
    assert_eq!(record.summary.state, EventState::Received);
    assert_eq!(record.summary.event_type, TYPE);
    assert_eq!(record.body, body, "the raw signed body, byte for byte");
    assert_eq!(record.path, "/webhooks/sangho");
    let names: Vec<&str> = record
        .headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(
        names,
        ["content-type", "sangho-signature", "sangho-event-id"]
    );
}

#[tokio::test]
async fn a_duplicate_is_answered_200_in_every_state() {
    let inbox = MemoryInbox::new();
    let service = receiver(inbox.clone());
    let id = unique_event_id("dup");
    assert_eq!(
        send(&service, delivery(&id).into_request()).await.status,
        StatusCode::ACCEPTED
    );
    let duplicate = |service: InboxReceiver, id: String| async move {
        let answer = send(&service, delivery(&id).into_request()).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.json(),
            serde_json::json!({ "received": true, "duplicate": true })
        );
        assert_eq!(
            answer.extensions.get::<Outcome>(),
            Some(&Outcome::Duplicate)
        );
    };
    duplicate(service.clone(), id.clone()).await; // received
    let token = sangho_webhook::store::ClaimToken::generate();
    let taken = inbox
        .take(
            &token,
            std::time::Duration::from_secs(60),
            Default::default(),
        )
        .await
        .unwrap()
        .unwrap();
    duplicate(service.clone(), id.clone()).await; // in flight
    let dead =
        sangho_webhook::inbox::FailedAttempt::new("x", sangho_webhook::inbox::NextAttempt::Dead);
    inbox.fail(&taken.claimant(), &dead).await.unwrap();
    duplicate(service.clone(), id.clone()).await; // dead
    inbox.replay(&id, &Default::default()).await.unwrap();
    let taken = inbox
        .take(
            &token,
            std::time::Duration::from_secs(60),
            Default::default(),
        )
        .await
        .unwrap()
        .unwrap();
    inbox
        .complete(&taken.claimant(), std::time::Duration::from_secs(60))
        .await
        .unwrap();
    duplicate(service, id).await; // completed
}

#[tokio::test]
async fn credentials_are_never_stored_and_added_headers_are() {
    let inbox = MemoryInbox::new();
    let service = InboxReceiver::builder(fixtures::secret(), inbox.clone())
        .with_clock(fixtures::fixed_clock)
        .with_stored_header(http::HeaderName::from_static("x-request-id"))
        .build()
        .unwrap();
    let id = unique_event_id("creds");
    let mut request = delivery(&id).into_request();
    let headers = request.headers_mut();
    headers.insert("authorization", HeaderValue::from_static("Bearer secret"));
    headers.insert("cookie", HeaderValue::from_static("session=secret"));
    headers.insert("x-request-id", HeaderValue::from_static("req_1"));
    headers.insert("x-other", HeaderValue::from_static("not stored"));
    assert_eq!(send(&service, request).await.status, StatusCode::ACCEPTED);
    let record = inbox.show(&id).await.unwrap().unwrap();
    let names: Vec<&str> = record
        .headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(names, ["content-type", "sangho-signature", "x-request-id"]);
    assert!(
        !format!("{record:?}").contains("secret"),
        "no credential in the row"
    );
}

#[test]
fn build_refuses_to_store_credentials() {
    for name in [
        http::header::AUTHORIZATION,
        http::header::COOKIE,
        http::header::PROXY_AUTHORIZATION,
    ] {
        let refused = InboxReceiver::builder(fixtures::secret(), MemoryInbox::new())
            .with_stored_header(name.clone())
            .build();
        assert_eq!(
            refused.err(),
            Some(ConfigError::CredentialHeaderStored(name))
        );
    }
    assert_eq!(STORED_HEADERS.len(), 3);
}

#[test]
fn build_refuses_an_inbox_whose_receipts_are_not_durable() {
    let asynchronous = FaultyInbox {
        asynchronous: true,
        ..FaultyInbox::default()
    };
    let refused = InboxReceiver::builder(fixtures::secret(), asynchronous).build();
    assert_eq!(refused.err(), Some(ConfigError::InboxNotDurable));
}

#[tokio::test]
async fn every_refusal_of_the_verify_stage_writes_nothing() {
    let inbox = FaultyInbox::default();
    let service = InboxReceiver::builder(fixtures::secret(), inbox.clone())
        .with_clock(fixtures::fixed_clock)
        .with_max_body_size(4096)
        .build()
        .unwrap();
    let secret = fixtures::secret();
    let wrong = sangho_webhook::signature::Secret::new("whsec_wrong").unwrap();
    let id = unique_event_id("bad");
    let cases = [
        (Delivery::event(&id, TYPE), "malformed_signature"),
        (
            Delivery::event(&id, TYPE).signed(&wrong, fixtures::NOW),
            "signature_mismatch",
        ),
        (
            Delivery::event(&id, TYPE).signed(&secret, fixtures::NOW - 3600),
            "timestamp_out_of_tolerance",
        ),
        (
            Delivery::body("not json").signed(&secret, fixtures::NOW),
            "invalid_json",
        ),
        (
            Delivery::body(r#"{"id":"evt 1","type":"x"}"#).signed(&secret, fixtures::NOW),
            "invalid_event_id",
        ),
        (
            Delivery::body(vec![b' '; 5000]).signed(&secret, fixtures::NOW),
            "payload_too_large",
        ),
        (
            Delivery::event(&id, TYPE)
                .signed(&secret, fixtures::NOW)
                .with_event_id_header("evt_other"),
            "event_id_mismatch",
        ),
    ];
    for (delivery, code) in cases {
        let answer = send(&service, delivery.into_request()).await;
        assert_eq!(answer.error_code(), code);
        assert!(answer.status.is_client_error(), "{code}: {}", answer.status);
        assert!(matches!(
            answer.extensions.get::<Outcome>(),
            Some(Outcome::Refused(_))
        ));
    }
    assert_eq!(
        inbox.receipts.load(Ordering::SeqCst),
        0,
        "the inbox was never called"
    );
    assert_eq!(inbox.inner.stats().await.unwrap(), Default::default());
}

#[tokio::test]
async fn a_store_failure_is_answered_503_and_acknowledges_nothing() {
    let inbox = FaultyInbox::default();
    inbox.down.store(true, Ordering::SeqCst);
    let service = receiver(inbox.clone());
    let id = unique_event_id("down");
    let answer = send(&service, delivery(&id).into_request()).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.error_code(), "store_unavailable");
    assert_eq!(answer.retry_after(), Some("5"));
    assert_eq!(
        answer.extensions.get::<Outcome>(),
        Some(&Outcome::Refused(RejectionKind::StoreUnavailable))
    );
    inbox.down.store(false, Ordering::SeqCst);
    assert_eq!(
        send(&service, delivery(&id).into_request()).await.status,
        StatusCode::ACCEPTED
    );
}
