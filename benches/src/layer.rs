//! What the layer's benchmark (`benches/layer.rs`) and the interleaved check of the same cases
//! (`tools/layer-profile`) share: the 2 KiB event, the layer at the fixtures' fixed time, the
//! handler, and the unavoidable work a receiver written by hand does.

use std::{convert::Infallible, hint::black_box};

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http::{Request, Response};
use http_body_util::Full;
use sangho_webhook::{
    SanghoWebhookLayer, WebhookBody,
    signature::Secret,
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, MokaStore},
    testing::{Delivery, fixtures},
};
use serde::Deserialize;
use sha2::Sha256;
use tower::ServiceExt;

/// The size of the event bodies.
pub const EVENT_SIZE: usize = 2048;
/// The type of the events.
pub const EVENT_TYPE: &str = "payment_intent.succeeded";

/// The two fields the layer needs; serde skips the rest without building it.
#[derive(Debug, Deserialize)]
pub struct Needed<'a> {
    /// The event's id.
    #[serde(borrow)]
    pub id: std::borrow::Cow<'a, str>,
    /// The event's type.
    #[serde(rename = "type", borrow)]
    pub event_type: std::borrow::Cow<'a, str>,
}

/// What the layer asks of the store for a new event: a claim, then a completion.
pub async fn claim_and_complete(store: &MokaStore, id: &str) {
    let token = ClaimToken::generate();
    let lease = SanghoWebhookLayer::DEFAULT_LEASE;
    let claim = store
        .claim(Claimant::new(id, EVENT_TYPE, &token), lease)
        .await;
    assert!(
        matches!(claim, Ok(Claim::Acquired)),
        "a fresh id is acquired"
    );
    let retention = SanghoWebhookLayer::DEFAULT_RETENTION;
    let completed = store
        .complete(Claimant::new(id, EVENT_TYPE, &token), retention)
        .await;
    assert!(matches!(completed, Ok(Completion::Recorded)));
}

/// The handler: answers 200 at once.
pub async fn handler<B>(_: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"{\"received\":true}",
    ))))
}

/// The layer at the fixtures' fixed time.
pub fn at_fixed_time(secret: &Secret, store: impl IdempotencyStore) -> SanghoWebhookLayer {
    SanghoWebhookLayer::builder(secret.clone(), store)
        .with_clock(fixtures::fixed_clock)
        .build()
        .expect("valid settings")
}

/// A 2 KiB `payment_intent.succeeded` event `id`, signed with `secret` at the fixtures' time.
pub fn delivery(secret: &Secret, id: &str) -> Delivery {
    let body = fixtures::sized_event_body(id, EVENT_TYPE, EVENT_SIZE);
    Delivery::body(body).signed(secret, fixtures::NOW)
}

/// Sends each request through `service`, one after the other.
pub fn through<S>(runtime: &tokio::runtime::Runtime, service: &S, requests: Requests)
where
    S: tower::Service<Request<WebhookBody>, Error = Infallible> + Clone,
{
    runtime.block_on(async {
        for request in requests {
            let response = service.clone().oneshot(request).await;
            black_box(response.map_err(|never| match never {}).ok());
        }
    })
}

/// Requests prepared for a run.
pub type Requests = Vec<Request<WebhookBody>>;

/// The timestamp and the decoded `v1` of a `t=…,v1=…` header (one `v1`).
pub fn timestamp_and_tag(header: &str) -> (&str, [u8; 32]) {
    let (timestamp, v1) = header
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .expect("t=…,v1=…");
    let mut tag = [0u8; 32];
    base16ct::lower::decode(v1, &mut tag).expect("hex");
    (timestamp, tag)
}

/// Raw HMAC-SHA256 of `"<timestamp>." + body`, keyed per call, compared with `tag`.
pub fn hmac_matches(timestamp: &str, tag: &[u8; 32], body: &[u8]) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(fixtures::SECRET.as_bytes()).expect("any key");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(tag).is_ok()
}

/// What a receiver written by hand does with each delivery, and no more: reads the signature
/// header, decodes its `v1`, computes the HMAC of `"<t>." + body` (keyed per call) and compares
/// it, and parses `id` and `type`. The request is dropped here, as the layer drops it.
pub fn by_hand(request: Request<WebhookBody>) -> (usize, usize) {
    let (parts, body) = request.into_parts();
    let body = ready_data(body);
    let header = parts
        .headers
        .get(&sangho_webhook::SIGNATURE_HEADER)
        .and_then(|value| value.to_str().ok())
        .expect("a signature header");
    let (timestamp, tag) = timestamp_and_tag(header);
    assert!(hmac_matches(timestamp, &tag, &body));
    let needed: Needed<'_> = serde_json::from_slice(&body).expect("an event");
    (needed.id.len(), needed.event_type.len())
}

/// The bytes of a body that is ready at once (a `WebhookBody`), without a runtime.
fn ready_data(body: WebhookBody) -> Bytes {
    use http_body::Body;
    let mut body = std::pin::pin!(body);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match body.as_mut().poll_frame(&mut context) {
        std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().expect("a data frame"),
        _ => Bytes::new(),
    }
}
