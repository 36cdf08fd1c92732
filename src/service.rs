//! [`SanghoWebhook`]: the request path, stage by stage as in the crate docs.

use std::{
    error::Error as StdError,
    sync::Arc,
    task::{Context, Poll},
};

use http::{HeaderName, Request, Response};
use http_body::Body;
use http_body_util::Full;
use tower_service::Service;
use tracing::{Instrument, field::Empty};

use crate::{
    Outcome, ResponseBody, ResponseFuture, SanghoEvent, SanghoWebhookLayer, WebhookBody,
    error_chain::ErrorChain,
    guard::{ClaimGuard, Processed},
    inbox::InboxDelivery,
    layer::Config,
    rejection::{Rejection, RejectionKind, duplicate_response, panicked_response},
    signature::Secret,
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
            duplicate_response().map(|body| ResponseBody::answer(Full::new(body))),
            Outcome::Duplicate,
        ),
        Answer::Panicked => (
            panicked_response().map(|body| ResponseBody::answer(Full::new(body))),
            Outcome::HandlerPanicked,
        ),
        Answer::Refused(rejection) => (
            config
                .verifier
                .refusal_response(rejection)
                .map(|body| ResponseBody::answer(Full::new(body))),
            Outcome::from(rejection.kind()),
        ),
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
    if parts.extensions.get::<InboxDelivery>().is_some() {
        tracing::error!(
            "an inbox worker's request reached a SanghoWebhookLayer: give the worker the \
             handlers alone, without the layer (the event was verified when it was received)"
        );
        let rejection = config.verifier.rejection(RejectionKind::InboxWorkerRequest);
        return Ok(Answer::Refused(rejection));
    }
    let event = match config.verifier.verify(&parts.headers, body).await {
        Ok(event) => event,
        Err(kind) => return Ok(Answer::Refused(config.verifier.rejection(kind))),
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

/// Logs a 409 (a store failure is logged by the caller, with its cause) and answers the
/// refusal.
fn refuse<B>(config: &Config, kind: RejectionKind, event_id: Option<&str>) -> Answer<B> {
    if kind == RejectionKind::InFlight {
        tracing::info!(
            event_id,
            "another delivery of this event is being processed; answering 409"
        );
    }
    Answer::Refused(config.verifier.rejection(kind))
}
