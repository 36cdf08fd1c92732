use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use http::{Request, Response, StatusCode};
use tower_service::Service;

use crate::{SanghoEvent, WebhookBody};

/// A handler for tests: counts its calls, checks that the layer handed it a [`SanghoEvent`],
/// optionally takes its time (so that deliveries overlap), and answers a fixed status.
///
/// Clones share the count.
///
/// ```
/// use sangho_webhook::testing::CountingHandler;
///
/// let handler = CountingHandler::new();
/// assert_eq!(handler.calls(), 0);
/// ```
#[derive(Clone, Debug)]
pub struct CountingHandler {
    calls: Arc<AtomicUsize>,
    delay: Duration,
    status: StatusCode,
}

impl CountingHandler {
    /// A handler that answers `200 {"received":true}` at once.
    pub fn new() -> Self {
        Self {
            calls: Arc::new(AtomicUsize::new(0)),
            delay: Duration::ZERO,
            status: StatusCode::OK,
        }
    }

    /// Sleeps this long before answering.
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Answers this status instead of 200.
    #[must_use]
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// How many times the handler was called.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Default for CountingHandler {
    fn default() -> Self {
        Self::new()
    }
}

impl<B> Service<Request<B>> for CountingHandler {
    type Response = Response<WebhookBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        assert!(
            request.extensions().get::<SanghoEvent>().is_some(),
            "the layer must put the event into the request extensions"
        );
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (delay, status) = (self.delay, self.status);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let mut response = Response::new(WebhookBody::from_static(b"{\"received\":true}"));
            *response.status_mut() = status;
            Ok(response)
        })
    }
}
