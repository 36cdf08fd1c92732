//! [`SanghoWebhook`]: the request path, step by step as in SPEC.md section 2.

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
    ResponseBody, ResponseFuture, SanghoEvent,
    future::ClaimGuard,
    layer::Config,
    rejection::{Rejection, RejectionKind, duplicate_response},
    signature,
    store::{Claim, ClaimToken, StoreError},
};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "sangho-signature";
/// The header carrying the event id (not signed: it must agree with the body's `id`).
pub const EVENT_ID_HEADER: &str = "sangho-event-id";

// The names as `HeaderName`s: a lookup by `&str` parses the name on every request.
static SIGNATURE_NAME: HeaderName = HeaderName::from_static(SIGNATURE_HEADER);
static EVENT_ID_NAME: HeaderName = HeaderName::from_static(EVENT_ID_HEADER);

type BoxError = Box<dyn StdError + Send + Sync>;

/// The service [`SanghoWebhookLayer`](crate::SanghoWebhookLayer) wraps around a handler.
///
/// The handler receives the request with its body buffered (`Full<Bytes>`, byte for byte what
/// was sent) and the [`SanghoEvent`] in its extensions. It is called only for a verified event
/// that this delivery claimed; its 2xx answer completes the event, anything else releases it.
#[derive(Clone, Debug)]
pub struct SanghoWebhook<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> SanghoWebhook<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for SanghoWebhook<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
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

/// One delivery, in the order of SPEC.md section 2.
async fn receive<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    let event = match verified_event(&config, &parts.headers, body).await {
        Ok(event) => event,
        Err(kind) => return Ok(reject(&config, kind)),
    };

    // 5. Claim the event.
    let token = ClaimToken::generate();
    let guard = match claim(&config, &event, &token).await {
        Ok(Claim::Acquired) => Some(ClaimGuard::new(&config, &event, token)),
        Ok(Claim::Completed) => {
            record_outcome("duplicate");
            tracing::debug!("already processed; acknowledged as a duplicate");
            return Ok(duplicate_response().map(ResponseBody::answer));
        }
        Ok(Claim::InFlight) => return Ok(reject(&config, RejectionKind::InFlight)),
        Err(error) if config.fail_open => {
            tracing::error!(error = %ErrorChain(&error), "store failed; failing open");
            None
        }
        Err(error) => {
            tracing::error!(error = %ErrorChain(&error), "store failed");
            return Ok(reject(&config, RejectionKind::StoreUnavailable));
        }
    };

    // 6. Call the handler with the event and the unchanged body.
    let mut request = Request::from_parts(parts, Full::new(event.raw().clone()));
    request.extensions_mut().insert(event);
    let result = inner.call(request).await;

    // 7. Record the outcome. Dropping this future before here releases the claim (the guard).
    let succeeded = matches!(&result, Ok(response) if response.status().is_success());
    if succeeded {
        record_outcome("processed");
        tracing::debug!("processed; completing the claim");
        if let Some(guard) = guard {
            guard.complete().await;
        }
    } else {
        record_outcome("failed");
        tracing::warn!("the handler failed; releasing the claim for the next delivery");
        if let Some(guard) = guard {
            guard.release().await;
        }
    }
    result.map(|response| response.map(ResponseBody::inner))
}

/// Steps 1 to 4: the body under its limit, the signature, the event, the event id header.
async fn verified_event<B>(
    config: &Config,
    headers: &HeaderMap,
    body: B,
) -> Result<SanghoEvent, RejectionKind>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let body = read_body(headers, body, config.max_body_size).await?;

    let signature = headers
        .get(&SIGNATURE_NAME)
        .filter(|_| headers.get_all(&SIGNATURE_NAME).iter().count() == 1)
        .and_then(|value| value.to_str().ok())
        .ok_or(RejectionKind::MalformedSignature)?;
    signature::verify(
        signature,
        &body,
        &config.secrets,
        (config.clock)(),
        config.tolerance,
    )?;

    let event = SanghoEvent::parse(body)?;
    let span = tracing::Span::current();
    span.record("event_id", event.id());
    span.record("event_type", event.event_type());

    if let Some(header_id) = headers.get(&EVENT_ID_NAME)
        && header_id.as_bytes() != event.id().as_bytes()
    {
        return Err(RejectionKind::EventIdMismatch);
    }
    Ok(event)
}

/// Step 1: collects the body, refusing it as soon as it is known to exceed `limit`.
async fn read_body<B>(headers: &HeaderMap, body: B, limit: usize) -> Result<Bytes, RejectionKind>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(RejectionKind::PayloadTooLarge);
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(RejectionKind::PayloadTooLarge),
        Err(error) => {
            tracing::debug!(error = %error, "the request body could not be read");
            Err(RejectionKind::BodyUnreadable)
        }
    }
}

/// Step 5, bounded by the store timeout.
async fn claim(
    config: &Config,
    event: &SanghoEvent,
    token: &ClaimToken,
) -> Result<Claim, StoreError> {
    let claim = config
        .store
        .claim(event.id(), event.event_type(), token, config.lease);
    tokio::time::timeout(config.store_timeout, claim)
        .await
        .unwrap_or(Err(StoreError::Timeout(config.store_timeout)))
}

/// Logs the rejection and builds its response.
fn reject<B>(config: &Config, kind: RejectionKind) -> Response<ResponseBody<B>> {
    record_outcome(match kind {
        RejectionKind::InFlight => "in_flight",
        RejectionKind::StoreUnavailable => "store_error",
        _ => "rejected",
    });
    tracing::warn!(reason = kind.code(), "webhook delivery refused");
    Rejection::new(kind)
        .into_response(config.retry_after)
        .map(ResponseBody::answer)
}

fn record_outcome(outcome: &'static str) {
    tracing::Span::current().record("outcome", outcome);
}

/// Displays an error with its sources, `outer: inner: innermost`.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn StdError + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}
