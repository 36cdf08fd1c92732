//! The answers the layer gives without calling the handler.

use std::{fmt, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::{event::EventError, signature::SignatureError};

/// Why the layer answered a delivery itself. Every kind has a status code and a short
/// machine-readable code, sent as `{"error":"<code>"}`. The kinds are every answer the layer
/// gives through a [`Rejection`] (and so through
/// [`with_rejection_response`](crate::SanghoWebhookLayerBuilder::with_rejection_response)):
/// the verification failures, and the two answers that ask the provider to retry later (409
/// and 503). The delivery's [`Outcome`](crate::Outcome) is
/// [`Outcome::Refused`](crate::Outcome::Refused) with the same kind.
///
/// | kind | status | code |
/// | --- | --- | --- |
/// | [`PayloadTooLarge`](Self::PayloadTooLarge) | 413 | `payload_too_large` |
/// | [`BodyUnreadable`](Self::BodyUnreadable) | 400 | `body_unreadable` |
/// | [`MalformedSignature`](Self::MalformedSignature) | 400 | `malformed_signature` |
/// | [`TimestampOutOfTolerance`](Self::TimestampOutOfTolerance) | 400 | `timestamp_out_of_tolerance` |
/// | [`SignatureMismatch`](Self::SignatureMismatch) | 400 | `signature_mismatch` |
/// | [`InvalidJson`](Self::InvalidJson) | 400 | `invalid_json` |
/// | [`InvalidEvent`](Self::InvalidEvent) | 400 | `invalid_event` |
/// | [`InvalidEventId`](Self::InvalidEventId) | 400 | `invalid_event_id` |
/// | [`InvalidEventType`](Self::InvalidEventType) | 400 | `invalid_event_type` |
/// | [`EventIdMismatch`](Self::EventIdMismatch) | 400 | `event_id_mismatch` |
/// | [`InFlight`](Self::InFlight) | 409, `Retry-After` | `in_flight` |
/// | [`StoreUnavailable`](Self::StoreUnavailable) | 503, `Retry-After` | `store_unavailable` |
/// | [`InboxWorkerRequest`](Self::InboxWorkerRequest) | 500 | `inbox_worker_request` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// The body is larger than the configured limit.
    PayloadTooLarge,
    /// The body could not be read (the client went away, or the transport failed).
    BodyUnreadable,
    /// The `Sangho-Signature` header is missing or malformed.
    MalformedSignature,
    /// The signature's timestamp is outside the tolerance (a replay, or a skewed clock).
    TimestampOutOfTolerance,
    /// No signature matches any configured secret.
    SignatureMismatch,
    /// The verified body is not JSON.
    InvalidJson,
    /// The verified body has no string `id` or `type`.
    InvalidEvent,
    /// The event id is not 1 to 50 characters of `[A-Za-z0-9_-]`.
    InvalidEventId,
    /// The event type is not 1 to 100 printable ASCII characters.
    InvalidEventType,
    /// The `Sangho-Event-ID` header differs from the signed body's `id`.
    EventIdMismatch,
    /// Another delivery of the same event is being processed right now.
    InFlight,
    /// The idempotency store failed or timed out.
    StoreUnavailable,
    /// The request came from an inbox worker: the worker calls the handlers directly, and a
    /// [`SanghoWebhookLayer`](crate::SanghoWebhookLayer) in its service is a misconfiguration.
    InboxWorkerRequest,
}

impl RejectionKind {
    /// The status code the layer answers with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InFlight => StatusCode::CONFLICT,
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::InboxWorkerRequest => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The machine-readable code, as in the response body.
    pub fn code(self) -> &'static str {
        match self {
            Self::PayloadTooLarge => "payload_too_large",
            Self::BodyUnreadable => "body_unreadable",
            Self::MalformedSignature => "malformed_signature",
            Self::TimestampOutOfTolerance => "timestamp_out_of_tolerance",
            Self::SignatureMismatch => "signature_mismatch",
            Self::InvalidJson => "invalid_json",
            Self::InvalidEvent => "invalid_event",
            Self::InvalidEventId => "invalid_event_id",
            Self::InvalidEventType => "invalid_event_type",
            Self::EventIdMismatch => "event_id_mismatch",
            Self::InFlight => "in_flight",
            Self::StoreUnavailable => "store_unavailable",
            Self::InboxWorkerRequest => "inbox_worker_request",
        }
    }
}

impl fmt::Display for RejectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl From<SignatureError> for RejectionKind {
    fn from(error: SignatureError) -> Self {
        match error {
            SignatureError::Malformed => Self::MalformedSignature,
            SignatureError::TimestampOutOfTolerance => Self::TimestampOutOfTolerance,
            SignatureError::Mismatch => Self::SignatureMismatch,
        }
    }
}

impl From<EventError> for RejectionKind {
    fn from(error: EventError) -> Self {
        match error {
            EventError::NotJson => Self::InvalidJson,
            EventError::NotAnEvent => Self::InvalidEvent,
            EventError::InvalidId => Self::InvalidEventId,
            EventError::InvalidType => Self::InvalidEventType,
        }
    }
}

/// A delivery the layer answered itself. It is also put into the response's extensions (with
/// its [`Outcome`](crate::Outcome)), so that an outer layer (metrics, logging) can tell why.
///
/// ```
/// use sangho_webhook::{Rejection, RejectionKind};
///
/// # fn check(response: http::Response<()>) {
/// if let Some(rejection) = response.extensions().get::<Rejection>() {
///     if rejection.kind() == RejectionKind::SignatureMismatch {
///         // count forged or misconfigured deliveries
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    kind: RejectionKind,
    retry_after: Option<Duration>,
}

/// Builds the response to a [`Rejection`]; see
/// [`with_rejection_response`](crate::SanghoWebhookLayerBuilder::with_rejection_response).
pub(crate) type RejectionResponse = Arc<dyn Fn(&Rejection) -> Response<Bytes> + Send + Sync>;

impl Rejection {
    pub(crate) fn new(kind: RejectionKind, retry_after: Duration) -> Self {
        let retryable = matches!(
            kind,
            RejectionKind::InFlight | RejectionKind::StoreUnavailable
        );
        Self {
            kind,
            retry_after: retryable.then(|| retry_after.max(Duration::from_secs(1))),
        }
    }

    /// Why the delivery was refused.
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// The status code of the default response.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// How long the provider should wait before retrying, for the two kinds it should retry
    /// (409 and 503): the layer sends it as `Retry-After` (whole seconds, at least 1).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The default response: the kind's status, `{"error":"<code>"}` as JSON, and
    /// `Retry-After` for 409 and 503.
    ///
    /// ```
    /// use sangho_webhook::{Rejection, RejectionKind};
    ///
    /// # fn show(rejection: &Rejection) {
    /// let response = rejection.default_response();
    /// assert_eq!(response.status(), rejection.status());
    /// # }
    /// ```
    pub fn default_response(&self) -> Response<Bytes> {
        let body = format!(r#"{{"error":"{}"}}"#, self.kind.code());
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = self.kind.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        self.add_retry_after(&mut response);
        response
    }

    /// Sets `Retry-After` on a 409 or 503 answer that has none.
    pub(crate) fn add_retry_after<B>(&self, response: &mut Response<B>) {
        if let Some(retry_after) = self.retry_after {
            response
                .headers_mut()
                .entry(header::RETRY_AFTER)
                .or_insert_with(|| HeaderValue::from(retry_after.as_secs()));
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "webhook rejected: {}", self.kind)
    }
}

/// The answer when the handler panicked: `500 {"error":"handler_panicked"}`. The claim was
/// released, so the provider's next delivery processes the event.
pub(crate) fn panicked_response() -> Response<Bytes> {
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        br#"{"error":"handler_panicked"}"#,
    )
}

/// The acknowledgement of an event processed already: `200 {"received":true,"duplicate":true}`.
pub(crate) fn duplicate_response() -> Response<Bytes> {
    json_response(StatusCode::OK, br#"{"received":true,"duplicate":true}"#)
}

/// `status` with the JSON `body`.
fn json_response(status: StatusCode, body: &'static [u8]) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from_static(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
