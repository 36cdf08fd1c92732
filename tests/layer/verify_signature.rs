//! The verify stage, the signature: the `Sangho-Signature` header's form, the HMAC, secret
//! rotation, the timestamp tolerance, and refusals that reveal nothing.

use super::*;

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
