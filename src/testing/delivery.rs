use bytes::Bytes;
use http::{Method, Request, header};

use crate::{EVENT_ID_HEADER, SIGNATURE_HEADER, WebhookBody, signature::Secret, testing::fixtures};

/// Builds a webhook delivery as the provider sends it, or spoiled in one precise way.
///
/// ```
/// use sangho_webhook::{signature::Secret, testing::{Delivery, fixtures}};
///
/// let secret = Secret::new(fixtures::SECRET).unwrap();
/// let request = Delivery::event("evt_1", "charge.succeeded")
///     .signed(&secret, fixtures::NOW)
///     .with_event_id_header("evt_1")
///     .into_request();
/// assert_eq!(request.headers()["sangho-event-id"], "evt_1");
/// ```
#[derive(Debug, Clone)]
pub struct Delivery {
    body: Bytes,
    signatures: Vec<String>,
    event_id: Option<String>,
    uri: String,
}

impl Delivery {
    /// An unsigned delivery of this exact body.
    pub fn body(body: impl Into<Bytes>) -> Self {
        Self {
            body: body.into(),
            signatures: Vec::new(),
            event_id: None,
            uri: "/webhooks/sangho".to_owned(),
        }
    }

    /// An unsigned delivery of a minimal event with this id and type.
    pub fn event(id: &str, event_type: &str) -> Self {
        Self::body(fixtures::event_body(id, event_type))
    }

    /// Signs the body with `secret` at `timestamp`, adding a `Sangho-Signature` header.
    #[must_use]
    pub fn signed(self, secret: &Secret, timestamp: i64) -> Self {
        let header = secret.sign(timestamp, &self.body);
        self.with_signature_header(header)
    }

    /// Adds a `Sangho-Signature` header with exactly this value.
    #[must_use]
    pub fn with_signature_header(mut self, value: impl Into<String>) -> Self {
        self.signatures.push(value.into());
        self
    }

    /// Adds a `Sangho-Event-ID` header.
    #[must_use]
    pub fn with_event_id_header(mut self, id: impl Into<String>) -> Self {
        self.event_id = Some(id.into());
        self
    }

    /// Posts to this path instead of `/webhooks/sangho`.
    #[must_use]
    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = uri.into();
        self
    }

    /// The body that will be sent.
    pub fn body_bytes(&self) -> &Bytes {
        &self.body
    }

    /// The `POST` request.
    ///
    /// # Panics
    ///
    /// If a header given to the builder is not a valid header value (a test bug).
    pub fn into_request(self) -> Request<WebhookBody> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.uri)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, self.body.len());
        for signature in self.signatures {
            builder = builder.header(SIGNATURE_HEADER, signature);
        }
        if let Some(id) = self.event_id {
            builder = builder.header(EVENT_ID_HEADER, id);
        }
        builder
            .body(WebhookBody::new(self.body))
            .expect("a delivery's parts are valid header values")
    }
}
