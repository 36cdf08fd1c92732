//! The verify stage, the event: its JSON, id and type, the `Sangho-Event-ID` header as the
//! deduplication key, and tolerance of fields it does not need.

use super::*;

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

// --- the deduplication key ------------------------------------------------------------

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
