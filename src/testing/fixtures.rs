//! Fixtures shared by the tests and the benchmarks: a secret, a fixed time, known-answer
//! signature vectors and event bodies.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::signature::Secret;

/// The secret of the known-answer vectors.
pub const SECRET: &str = "whsec_test_secret";

/// The event type of the tests' events.
pub const EVENT_TYPE: &str = "payment_intent.succeeded";

/// [`SECRET`] as a [`Secret`].
///
/// ```
/// let secret = sangho_webhook::testing::fixtures::secret();
/// # let _ = secret;
/// ```
pub fn secret() -> Secret {
    Secret::new(SECRET).expect("the fixture secret is valid")
}

/// The fixed "now" of the tests, in Unix seconds.
pub const NOW: i64 = 1_700_000_000;

/// A clock that always reads [`NOW`], for
/// [`with_clock`](crate::SanghoWebhookLayerBuilder::with_clock).
pub fn fixed_clock() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW.unsigned_abs())
}

/// A known-answer signature: `body` signed with [`SECRET`] at `timestamp` gives `v1`.
#[derive(Debug, Clone, Copy)]
pub struct KnownAnswer {
    /// The raw body.
    pub body: &'static [u8],
    /// The `t` of the header.
    pub timestamp: i64,
    /// The expected `v1`.
    pub v1: &'static str,
}

/// Public vectors, produced by Stripe's own SDKs for this header format.
pub const KNOWN_ANSWERS: [KnownAnswer; 2] = [
    KnownAnswer {
        body: br#"{"id":"evt_test_webhook","object":"event"}"#,
        timestamp: 1_700_000_000,
        v1: "d95c6b7477fbd7e9f90b1b0ef5f9c7ac25abca5382460e0d988c2b2a5b71b990",
    },
    KnownAnswer {
        body: b"",
        timestamp: 1_700_000_000,
        v1: "316b9ab98c15bfa039d243f3196acee619cf29749a91a634e6a8154e2f7b6727",
    },
];

/// A minimal event body with this id and type.
///
/// ```
/// let body = sangho_webhook::testing::fixtures::event_body("evt_1", "charge.succeeded");
/// assert!(sangho_webhook::SanghoEvent::parse(body.into()).is_ok());
/// ```
pub fn event_body(id: &str, event_type: &str) -> Vec<u8> {
    sized_event_body(id, event_type, 0)
}

/// An event body with this id and type, padded (inside `data.object.description`) to at least
/// `size` bytes: the realistic payload of the benchmarks.
///
/// ```
/// let body = sangho_webhook::testing::fixtures::sized_event_body("evt_1", "charge.succeeded", 2048);
/// assert!(body.len() >= 2048 && body.len() < 2048 + 8);
/// ```
pub fn sized_event_body(id: &str, event_type: &str, size: usize) -> Vec<u8> {
    let head = format!(
        r#"{{"id":"{id}","object":"event","type":"{event_type}","created":{NOW},"livemode":false,"api_version":"2026-01-01","data":{{"object":{{"id":"pi_3PqL","object":"payment_intent","amount":2000,"currency":"eur","description":""#
    );
    let tail = r#""}}}"#;
    let padding = size.saturating_sub(head.len() + tail.len());
    let mut body = Vec::with_capacity(head.len() + padding + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.resize(body.len() + padding, b'x');
    body.extend_from_slice(tail.as_bytes());
    body
}
