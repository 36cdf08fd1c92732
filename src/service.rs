//! [`SanghoWebhook`]: the request path, stage by stage as in the crate docs.

use std::{
    error::Error as StdError,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, Response, header};
use http_body::Body;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use tower_service::Service;
use tracing::{Instrument, field::Empty};

use crate::{
    Outcome, ResponseBody, ResponseFuture, SanghoEvent, SanghoWebhookLayer, WebhookBody,
    error_chain::ErrorChain,
    guard::{ClaimGuard, Processed},
    layer::Config,
    rejection::{Rejection, RejectionKind, duplicate_response, panicked_response},
    signature::{Secret, SignatureHeader},
    store::{Claim, IdempotencyStore},
};

/// The header carrying the signature: `Sangho-Signature`.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("sangho-signature");
/// The header carrying the event id, `Sangho-Event-ID` (not signed: it must agree with the
/// body's `id`).
pub const EVENT_ID_HEADER: HeaderName = HeaderName::from_static("sangho-event-id");

type BoxError = Box<dyn StdError + Send + Sync>;

/// The service [`SanghoWebhookLayer`](crate::SanghoWebhookLayer) wraps around a handler.
///
/// The handler receives the request with its body buffered (a [`WebhookBody`], byte for byte
/// what was sent) and the [`SanghoEvent`] in its extensions. It is called only for a verified
/// event that this delivery claimed; its 2xx answer completes the event, anything else
/// releases it. Every response carries an [`Outcome`] in its extensions.
///
/// ```
/// use sangho_webhook::{SanghoWebhook, WebhookBody, signature::Secret, store::MokaStore};
/// use tower::{Layer, service_fn};
///
/// let handler = service_fn(|_: http::Request<WebhookBody>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
/// });
/// let layer = SanghoWebhook::<()>::layer(Secret::new("whsec_x").unwrap(), MokaStore::new());
/// let service = layer.layer(handler);
/// # let _ = service;
/// ```
#[derive(Clone, Debug)]
pub struct SanghoWebhook<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> SanghoWebhook<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// A [`SanghoWebhookLayer`] with the default settings, as
    /// [`SanghoWebhookLayer::new`].
    pub fn layer(secret: Secret, store: impl IdempotencyStore) -> SanghoWebhookLayer {
        SanghoWebhookLayer::new(secret, store)
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for SanghoWebhook<S>
where
    S: Service<Request<WebhookBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: Into<BoxError>,
    ResBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone that was driven to readiness serves this request; the new one waits for
        // the next `poll_ready`.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let span = tracing::info_span!(
            "sangho_webhook",
            event_id = Empty,
            event_type = Empty,
            outcome = Empty
        );
        ResponseFuture::new(receive(self.config.clone(), inner, request).instrument(span))
    }
}

/// One delivery, in the order of the crate docs. Every response leaves with its [`Outcome`].
async fn receive<S, ReqBody, ResBody>(
    config: Arc<Config>,
    inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<WebhookBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
    ResBody: Send + 'static,
{
    let (mut response, outcome) = match deliver(&config, inner, request).await? {
        Answer::Handler(response, outcome) => (response.map(ResponseBody::inner), outcome),
        Answer::Duplicate => (
            duplicate_response().map(ResponseBody::answer),
            Outcome::Duplicate,
        ),
        Answer::Panicked => (
            panicked_response().map(ResponseBody::answer),
            Outcome::HandlerPanicked,
        ),
        Answer::Refused(rejection) => {
            let mut response = (config.rejection_response)(&rejection);
            rejection.add_retry_after(&mut response);
            response.extensions_mut().insert(rejection);
            let response = response.map(|body| ResponseBody::answer(Full::new(body)));
            (response, Outcome::from(rejection.kind()))
        }
    };
    tracing::Span::current().record("outcome", outcome.code());
    response.extensions_mut().insert(outcome);
    Ok(response)
}

/// How a delivery was answered, before its outcome goes into the response.
enum Answer<B> {
    /// The handler's response.
    Handler(Response<B>, Outcome),
    /// The event was processed already.
    Duplicate,
    /// The handler panicked.
    Panicked,
    /// The layer refused the delivery.
    Refused(Rejection),
}

/// One delivery, stage by stage as in the crate docs: verify, claim, handle and settle.
async fn deliver<S, ReqBody, ResBody>(
    config: &Arc<Config>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Answer<ResBody>, S::Error>
where
    S: Service<Request<WebhookBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
    ResBody: Send + 'static,
{
    let (parts, body) = request.into_parts();
    let event = match verify(config, &parts.headers, body).await {
        Ok(event) => event,
        Err(refused) => return Ok(refused),
    };
    // From here, dropping the guard settles the claim.
    let mut guard = ClaimGuard::new(config, &event);
    if let Some(answer) = claim(config, &mut guard, &event).await {
        return Ok(answer);
    }
    // Handle and settle, whether or not the provider is still listening.
    let mut request = Request::from_parts(parts, WebhookBody::new(event.raw().clone()));
    request
        .extensions_mut()
        .insert(event.with_claim(guard.delivery_claim()));
    Ok(match guard.process(inner.call(request)).await {
        Processed::Answered(response, outcome) => Answer::Handler(response, outcome),
        Processed::Failed(error) => return Err(error),
        Processed::Panicked => Answer::Panicked,
    })
}

/// Verify: the checks before anything is written, then the deduplication key. The key is the
/// signed id; an unsigned `Sangho-Event-ID` header must agree with it.
async fn verify<B, ResBody>(
    config: &Config,
    headers: &HeaderMap,
    body: B,
) -> Result<SanghoEvent, Answer<ResBody>>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let event = verified_event(config, headers, body)
        .await
        .map_err(|kind| refuse(config, kind, None))?;
    if let Some(header_id) = headers.get(&EVENT_ID_HEADER)
        && header_id.as_bytes() != event.id().as_bytes()
    {
        let kind = RejectionKind::EventIdMismatch;
        return Err(refuse(config, kind, Some(event.id())));
    }
    Ok(event)
}

/// Claim: the event under the guard's fresh token. `None` when this delivery owns the event
/// (or the store failed and the layer fails open); otherwise the answer: a duplicate, 409 or
/// 503.
async fn claim<B>(
    config: &Config,
    guard: &mut ClaimGuard,
    event: &SanghoEvent,
) -> Option<Answer<B>> {
    let event_id = Some(event.id());
    match guard.claim().await {
        Ok(Claim::Acquired) => None,
        Ok(Claim::Completed) => {
            tracing::info!(event_id, "already processed; acknowledged as a duplicate");
            Some(Answer::Duplicate)
        }
        Ok(Claim::InFlight) => Some(refuse(config, RejectionKind::InFlight, event_id)),
        Err(error) if config.fail_open => {
            tracing::error!(
                event_id,
                error = %ErrorChain(&error),
                "the idempotency store failed; failing open: processing without deduplication"
            );
            None
        }
        Err(error) => {
            tracing::error!(
                event_id,
                error = %ErrorChain(&error),
                "the idempotency store failed; answering 503 so that the provider retries"
            );
            Some(refuse(config, RejectionKind::StoreUnavailable, event_id))
        }
    }
}

/// The declared length, the signature header and its timestamp (before any of the body is
/// read), the body under its limit, the signature, the event.
async fn verified_event<B>(
    config: &Config,
    headers: &HeaderMap,
    body: B,
) -> Result<SanghoEvent, RejectionKind>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    if declared_length(headers).is_some_and(|length| length > config.max_body_size as u64) {
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
    signature.check_timestamp((config.clock)(), config.tolerance)?;

    let body = read_body(body, config.max_body_size).await?;
    signature.verify(&body, &config.secrets)?;

    let event = SanghoEvent::parse(body)?;
    let span = tracing::Span::current();
    span.record("event_id", event.id());
    span.record("event_type", event.event_type());
    Ok(event)
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

/// Logs the refusal (with the event id when it is known). A store failure is logged by the
/// caller, with its cause.
fn refuse<B>(config: &Config, kind: RejectionKind, event_id: Option<&str>) -> Answer<B> {
    match kind {
        RejectionKind::InFlight => tracing::info!(
            event_id,
            "another delivery of this event is being processed; answering 409"
        ),
        RejectionKind::StoreUnavailable => {}
        _ => tracing::warn!(event_id, reason = kind.code(), "webhook delivery refused"),
    }
    Answer::Refused(Rejection::new(kind, config.retry_after))
}
