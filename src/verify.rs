//! The verify stage, the same in both modes: the checks that run before anything is written,
//! and the answers to the deliveries they refuse.

use std::{error::Error as StdError, fmt, sync::Arc, time::Duration, time::SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Response, header};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::{
    Outcome, Rejection, RejectionKind, SanghoEvent,
    rejection::RejectionResponse,
    service::{EVENT_ID_HEADER, SIGNATURE_HEADER},
    signature::{Secret, SignatureHeader},
};

type BoxError = Box<dyn StdError + Send + Sync>;

/// A source of the current time, for the timestamp tolerance check.
pub(crate) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The verification settings, and the answers to refused deliveries.
#[derive(Clone)]
pub(crate) struct Verifier {
    pub(crate) secrets: Vec<Secret>,
    pub(crate) max_body_size: usize,
    pub(crate) tolerance: Duration,
    pub(crate) retry_after: Duration,
    pub(crate) rejection_response: RejectionResponse,
    pub(crate) clock: Clock,
}

/// The default body limit: 1 MiB.
pub(crate) const DEFAULT_MAX_BODY_SIZE: usize = 1024 * 1024;
/// The default timestamp tolerance: 300 s.
pub(crate) const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// The default `Retry-After` on 409 and 503: 5 s.
pub(crate) const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

impl Verifier {
    /// The defaults, accepting events signed with `secret`.
    pub(crate) fn new(secret: Secret) -> Self {
        Self {
            secrets: vec![secret],
            max_body_size: DEFAULT_MAX_BODY_SIZE,
            tolerance: DEFAULT_TOLERANCE,
            retry_after: DEFAULT_RETRY_AFTER,
            rejection_response: Arc::new(Rejection::default_response),
            clock: Arc::new(SystemTime::now),
        }
    }

    /// The declared length, the signature header and its timestamp (before any of the body is
    /// read), the body under its limit, the signature, the event; then the deduplication key:
    /// the signed id, with which an unsigned `Sangho-Event-ID` header must agree. A refusal is
    /// logged here, with the event id when it is known.
    pub(crate) async fn verify<B>(
        &self,
        headers: &HeaderMap,
        body: B,
    ) -> Result<SanghoEvent, RejectionKind>
    where
        B: Body,
        B::Error: Into<BoxError>,
    {
        let event = self
            .verified_event(headers, body)
            .await
            .inspect_err(|kind| {
                tracing::warn!(reason = kind.code(), "webhook delivery refused");
            })?;
        if let Some(header_id) = headers.get(&EVENT_ID_HEADER)
            && header_id.as_bytes() != event.id().as_bytes()
        {
            let kind = RejectionKind::EventIdMismatch;
            tracing::warn!(
                event_id = event.id(),
                reason = kind.code(),
                "webhook delivery refused"
            );
            return Err(kind);
        }
        Ok(event)
    }

    async fn verified_event<B>(
        &self,
        headers: &HeaderMap,
        body: B,
    ) -> Result<SanghoEvent, RejectionKind>
    where
        B: Body,
        B::Error: Into<BoxError>,
    {
        if declared_length(headers).is_some_and(|length| length > self.max_body_size as u64) {
            return Err(RejectionKind::PayloadTooLarge);
        }
        let mut values = headers.get_all(&SIGNATURE_HEADER).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(RejectionKind::MalformedSignature);
        };
        let text = value
            .to_str()
            .map_err(|_| RejectionKind::MalformedSignature)?;
        let signature = SignatureHeader::parse(text)?;
        signature.check_timestamp((self.clock)(), self.tolerance)?;

        let body = read_body(body, self.max_body_size).await?;
        signature.verify(&body, &self.secrets)?;

        let event = SanghoEvent::parse(body)?;
        let span = tracing::Span::current();
        span.record("event_id", event.id());
        span.record("event_type", event.event_type());
        Ok(event)
    }

    /// The refusal of a delivery, as it goes into the answer.
    pub(crate) fn rejection(&self, kind: RejectionKind) -> Rejection {
        Rejection::new(kind, self.retry_after)
    }

    /// The response to a refused delivery: the configured response, `Retry-After` on 409 and
    /// 503, the [`Rejection`] and its [`Outcome`] in the extensions.
    pub(crate) fn refusal_response(&self, rejection: Rejection) -> Response<Bytes> {
        let mut response = (self.rejection_response)(&rejection);
        rejection.add_retry_after(&mut response);
        response.extensions_mut().insert(rejection);
        response
            .extensions_mut()
            .insert(Outcome::from(rejection.kind()));
        response
    }
}

/// The `Content-Length` the client declared, if any.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
}

/// Collects the body, refusing it as soon as it is known to exceed `limit`.
async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, RejectionKind>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(RejectionKind::PayloadTooLarge),
        Err(error) => {
            tracing::debug!(error = %error, "the request body could not be read");
            Err(RejectionKind::BodyUnreadable)
        }
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("secrets", &self.secrets)
            .field("max_body_size", &self.max_body_size)
            .field("tolerance", &self.tolerance)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}
