//! [`InboxReceiver`]: the receipt of inbox mode, a service that verifies each delivery and
//! stores it durably before answering.

use std::{
    convert::Infallible,
    error::Error as StdError,
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use tower_service::Service;
use tracing::{Instrument, field::Empty};

use super::{Inbox, Receipt, ReceivedEvent, stored_ordering_key};
use crate::{
    ConfigError, Outcome, Rejection, RejectionKind, SanghoEvent, WebhookBody,
    error_chain::ErrorChain,
    rejection::duplicate_response,
    service::{EVENT_ID_HEADER, SIGNATURE_HEADER},
    signature::Secret,
    verify::Verifier,
};

type BoxError = Box<dyn StdError + Send + Sync>;

/// The headers a receipt stores by default: `Content-Type`, `Sangho-Signature` and
/// `Sangho-Event-ID`. [`with_stored_header`](InboxReceiverBuilder::with_stored_header) adds
/// others; credentials are never stored.
pub const STORED_HEADERS: [HeaderName; 3] =
    [header::CONTENT_TYPE, SIGNATURE_HEADER, EVENT_ID_HEADER];

/// Headers that carry credentials: never stored.
const CREDENTIALS: [HeaderName; 4] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
    header::SET_COOKIE,
];

/// The receipt of inbox mode: verifies each delivery as the direct mode does, stores the
/// event in an [`Inbox`] and answers `202` once it is durable (a duplicate `200`, a store
/// failure `503`); the module docs have the table of answers. Every response carries an
/// [`Outcome`] in its extensions, and a refusal its [`Rejection`].
///
/// It is a service of its own, not a layer: in inbox mode the handler runs in an
/// [`InboxWorker`](super::InboxWorker), never inside the provider's request.
///
/// ```
/// use axum::Router;
/// use sangho_webhook::{inbox::{InboxReceiver, MemoryInbox}, signature::Secret};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let inbox = MemoryInbox::new(); // tests only: use a SQL store in production
/// let receiver = InboxReceiver::builder(Secret::new("whsec_x")?, inbox).build()?;
/// let app: Router = Router::new().route_service("/webhooks/sangho", receiver);
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct InboxReceiver {
    shared: Arc<Shared>,
}

struct Shared {
    verifier: Verifier,
    stored_headers: Vec<HeaderName>,
    store_timeout: Duration,
    inbox: Arc<dyn Inbox>,
    ordering_key: Option<OrderingKeyFn>,
}

/// How the receiver finds an event's ordering key.
type OrderingKeyFn = Arc<dyn Fn(&SanghoEvent) -> Option<String> + Send + Sync>;

impl InboxReceiver {
    /// The default time a receipt may take before it is answered 503: 5 s.
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(5);

    /// A builder starting from the defaults, accepting events signed with `secret` and storing
    /// them in `inbox`.
    pub fn builder(secret: Secret, inbox: impl Inbox) -> InboxReceiverBuilder {
        InboxReceiverBuilder {
            verifier: Verifier::new(secret),
            stored_headers: STORED_HEADERS.to_vec(),
            store_timeout: Self::DEFAULT_STORE_TIMEOUT,
            inbox: Arc::new(inbox),
            ordering_key: None,
        }
    }
}

/// Builds an [`InboxReceiver`]; [`build`](Self::build) refuses settings that cannot work.
///
/// | setting | default | builder |
/// | --- | --- | --- |
/// | secrets | the one given to [`builder`](InboxReceiver::builder) | [`with_secret`](Self::with_secret) adds one (rotation) |
/// | body limit | 1 MiB | [`with_max_body_size`](Self::with_max_body_size) |
/// | timestamp tolerance | 300 s, both directions | [`with_tolerance`](Self::with_tolerance) |
/// | stored headers | [`STORED_HEADERS`] | [`with_stored_header`](Self::with_stored_header) adds one |
/// | store timeout | 5 s | [`with_store_timeout`](Self::with_store_timeout) |
/// | `Retry-After` on 409 and 503 | 5 s | [`with_retry_after`](Self::with_retry_after) |
/// | refusal responses | `{"error":"<code>"}` | [`with_rejection_response`](Self::with_rejection_response) |
/// | clock | the system clock | [`with_clock`](Self::with_clock) |
/// | ordering key | none: every event may run beside any other | [`with_ordering_key`](Self::with_ordering_key) |
///
/// ```
/// use sangho_webhook::{ConfigError, inbox::{InboxReceiver, MemoryInbox}, signature::Secret};
///
/// let refused = InboxReceiver::builder(Secret::new("whsec_x").unwrap(), MemoryInbox::new())
///     .with_stored_header(http::header::AUTHORIZATION)
///     .build();
/// assert!(matches!(refused, Err(ConfigError::CredentialHeaderStored(_))));
/// ```
#[must_use]
pub struct InboxReceiverBuilder {
    verifier: Verifier,
    stored_headers: Vec<HeaderName>,
    store_timeout: Duration,
    inbox: Arc<dyn Inbox>,
    ordering_key: Option<OrderingKeyFn>,
}

impl InboxReceiverBuilder {
    /// Accepts events signed with `secret` too (a rotation).
    pub fn with_secret(mut self, secret: Secret) -> Self {
        self.verifier.secrets.push(secret);
        self
    }

    /// Refuses bodies larger than `bytes` with 413 (at least 1). The inbox stores bodies up to
    /// this size.
    pub fn with_max_body_size(mut self, bytes: usize) -> Self {
        self.verifier.max_body_size = bytes;
        self
    }

    /// Accepts signatures whose timestamp is at most `tolerance` before or after now (at
    /// least 1 s). Only the receipt checks it: a worker processes a stored event however old.
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.verifier.tolerance = tolerance;
        self
    }

    /// Stores `name` too, for a handler that reads it. Credentials (`Authorization`,
    /// `Proxy-Authorization`, `Cookie`, `Set-Cookie`) are refused by [`build`](Self::build).
    pub fn with_stored_header(mut self, name: HeaderName) -> Self {
        if !self.stored_headers.contains(&name) {
            self.stored_headers.push(name);
        }
        self
    }

    /// Gives each receipt at most `timeout` (at least 1 s); past it, the delivery is answered
    /// 503 and the provider retries (the row may have been written: the retry is then a
    /// duplicate).
    pub fn with_store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Sends `Retry-After` with this many seconds (at least 1) on 409 and 503.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.verifier.retry_after = retry_after;
        self
    }

    /// Answers refused deliveries with `response` instead of the default JSON, as
    /// [`SanghoWebhookLayerBuilder::with_rejection_response`](crate::SanghoWebhookLayerBuilder::with_rejection_response).
    pub fn with_rejection_response<F, B>(mut self, response: F) -> Self
    where
        F: Fn(&Rejection) -> Response<B> + Send + Sync + 'static,
        B: Into<Bytes>,
    {
        self.verifier.rejection_response =
            Arc::new(move |rejection| response(rejection).map(Into::into));
        self
    }

    /// Gives each event the ordering key `key` finds (`None`: no key): events with one key are
    /// processed one at a time, in the order of receipt (see [per-object
    /// ordering](crate::inbox#per-object-ordering)). A key longer than
    /// [`MAX_ORDERING_KEY_LEN`](super::MAX_ORDERING_KEY_LEN) bytes is stored as its hash.
    ///
    /// ```
    /// use sangho_webhook::{inbox::{InboxReceiver, MemoryInbox, object_id}, signature::Secret};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // The events of one invoice, one customer, one payment...: one at a time.
    /// let receiver = InboxReceiver::builder(Secret::new("whsec_x")?, MemoryInbox::new())
    ///     .with_ordering_key(object_id)
    ///     .build()?;
    /// # let _ = receiver;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_ordering_key(
        mut self,
        key: impl Fn(&SanghoEvent) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.ordering_key = Some(Arc::new(key));
        self
    }

    /// Reads the current time from `clock` instead of the system clock (for tests).
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.verifier.clock = Arc::new(clock);
        self
    }

    /// The receiver, or the first setting that cannot work.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`]: [`InboxNotDurable`](ConfigError::InboxNotDurable) for a store whose
    /// receipts are not durable (asynchronous commits), which would acknowledge events that
    /// a crash loses; [`CredentialHeaderStored`](ConfigError::CredentialHeaderStored); and
    /// the limits of the direct mode's settings.
    pub fn build(self) -> Result<InboxReceiver, ConfigError> {
        if !self.inbox.receipts_are_durable() {
            return Err(ConfigError::InboxNotDurable);
        }
        if let Some(name) = self
            .stored_headers
            .iter()
            .find(|name| CREDENTIALS.contains(name))
        {
            return Err(ConfigError::CredentialHeaderStored(name.clone()));
        }
        if self.verifier.tolerance < Duration::from_secs(1) {
            return Err(ConfigError::ToleranceTooShort(self.verifier.tolerance));
        }
        if self.store_timeout < Duration::from_secs(1) {
            return Err(ConfigError::StoreTimeoutTooShort(self.store_timeout));
        }
        if self.verifier.max_body_size == 0 {
            return Err(ConfigError::EmptyBodyLimit);
        }
        Ok(InboxReceiver {
            shared: Arc::new(Shared {
                verifier: self.verifier,
                stored_headers: self.stored_headers,
                store_timeout: self.store_timeout,
                inbox: self.inbox,
                ordering_key: self.ordering_key,
            }),
        })
    }
}

/// The future of an [`InboxReceiver`]'s answer.
pub type ReceiptFuture =
    Pin<Box<dyn Future<Output = Result<Response<WebhookBody>, Infallible>> + Send>>;

impl<B> Service<Request<B>> for InboxReceiver
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<WebhookBody>;
    type Error = Infallible;
    type Future = ReceiptFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = self.shared.clone();
        let span = tracing::info_span!(
            "sangho_inbox_receipt",
            event_id = Empty,
            event_type = Empty,
            outcome = Empty
        );
        Box::pin(
            async move {
                let response = shared.receive(request).await;
                let outcome = response.extensions().get::<Outcome>().copied();
                tracing::Span::current().record("outcome", outcome.map(Outcome::code));
                Ok(response)
            }
            .instrument(span),
        )
    }
}

impl Shared {
    /// Verify, then store.
    async fn receive<B>(&self, request: Request<B>) -> Response<WebhookBody>
    where
        B: Body,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = request.into_parts();
        let event = match self.verifier.verify(&parts.headers, body).await {
            Ok(event) => event,
            Err(kind) => return self.refuse(kind),
        };
        let headers = self.stored(&parts.headers);
        let key = self.ordering_key.as_ref().and_then(|key| key(&event));
        let key = key.as_deref().map(stored_ordering_key);
        let received = ReceivedEvent::new(
            event.id(),
            event.event_type(),
            event.raw(),
            &headers,
            parts.uri.path(),
        )
        .with_ordering_key(key.as_deref());
        let event_id = Some(event.id());
        match tokio::time::timeout(self.store_timeout, self.inbox.receive(&received)).await {
            Ok(Ok(Receipt::Stored)) => {
                tracing::info!(event_id, "stored in the inbox");
                stored_response()
            }
            Ok(Ok(Receipt::Duplicate)) => {
                tracing::info!(
                    event_id,
                    "already in the inbox; acknowledged as a duplicate"
                );
                let mut response = duplicate_response().map(WebhookBody::new);
                response.extensions_mut().insert(Outcome::Duplicate);
                response
            }
            Ok(Ok(Receipt::ClaimedByDelivery)) => {
                tracing::info!(
                    event_id,
                    "a direct-mode delivery of this event is being processed; answering 409"
                );
                self.refuse(RejectionKind::InFlight)
            }
            Ok(Err(error)) => {
                tracing::error!(
                    event_id,
                    error = %ErrorChain(&error),
                    "the inbox failed; answering 503 so that the provider retries"
                );
                self.refuse(RejectionKind::StoreUnavailable)
            }
            Err(_) => {
                tracing::error!(
                    event_id,
                    timeout = ?self.store_timeout,
                    "the inbox did not answer in time; answering 503 so that the provider retries"
                );
                self.refuse(RejectionKind::StoreUnavailable)
            }
        }
    }

    /// The allow-listed headers, lower-case names in the order received; values that are not
    /// visible ASCII are left out.
    fn stored(&self, headers: &HeaderMap) -> Vec<(String, String)> {
        headers
            .iter()
            .filter(|(name, _)| self.stored_headers.contains(name))
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect()
    }

    fn refuse(&self, kind: RejectionKind) -> Response<WebhookBody> {
        let rejection = self.verifier.rejection(kind);
        self.verifier
            .refusal_response(rejection)
            .map(WebhookBody::new)
    }
}

/// `202 {"received":true}`: the event is stored durably.
fn stored_response() -> Response<WebhookBody> {
    let mut response = Response::new(WebhookBody::from_static(br#"{"received":true}"#));
    *response.status_mut() = StatusCode::ACCEPTED;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.extensions_mut().insert(Outcome::Stored);
    response
}

impl fmt::Debug for InboxReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxReceiver")
            .field("verifier", &self.shared.verifier)
            .field("stored_headers", &self.shared.stored_headers)
            .field("store_timeout", &self.shared.store_timeout)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for InboxReceiverBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxReceiverBuilder")
            .field("verifier", &self.verifier)
            .field("stored_headers", &self.stored_headers)
            .field("store_timeout", &self.store_timeout)
            .finish_non_exhaustive()
    }
}
