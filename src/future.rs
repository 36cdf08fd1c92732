//! [`ResponseFuture`], and the claim guard it holds while the handler runs.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::Response;

use crate::{
    ResponseBody,
    layer::Config,
    service::ErrorChain,
    store::{ClaimToken, IdempotencyStore},
};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The response future of [`SanghoWebhook`](crate::SanghoWebhook).
///
/// Dropping it before it completes (the client went away) releases the event's claim, so that
/// the next delivery processes the event.
pub struct ResponseFuture<B, E> {
    inner: BoxFuture<Result<Response<ResponseBody<B>>, E>>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        future: impl Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// What an armed guard does if it is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settle {
    Release,
    Complete,
}

/// Owns a claim while the handler runs.
///
/// [`complete`](Self::complete) and [`release`](Self::release) settle it. If it is dropped
/// unsettled (the handler panicked, or the response future was dropped), it settles in a
/// spawned task: a release, or, when the handler had already succeeded and only the completion
/// was interrupted, the completion.
pub(crate) struct ClaimGuard {
    store: Arc<dyn IdempotencyStore>,
    event_id: String,
    event_type: String,
    token: Option<ClaimToken>,
    retention: Duration,
    timeout: Duration,
    on_drop: Settle,
}

impl ClaimGuard {
    pub(crate) fn new(config: &Config, event: &crate::SanghoEvent, token: ClaimToken) -> Self {
        Self {
            store: config.store.clone(),
            event_id: event.id().to_owned(),
            event_type: event.event_type().to_owned(),
            token: Some(token),
            retention: config.retention,
            timeout: config.store_timeout,
            on_drop: Settle::Release,
        }
    }

    /// The handler succeeded: marks the event completed.
    pub(crate) async fn complete(mut self) {
        self.on_drop = Settle::Complete;
        self.settle().await;
    }

    /// The handler failed: forgets the claim.
    pub(crate) async fn release(mut self) {
        self.settle().await;
    }

    async fn settle(&mut self) {
        if let Some(token) = &self.token {
            settle(
                &*self.store,
                &self.event_id,
                &self.event_type,
                token,
                self.on_drop,
                self.retention,
                self.timeout,
            )
            .await;
        }
        self.token = None;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(token) = self.token.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                event_id = %self.event_id,
                "no runtime to release the claim on; it will expire with its lease"
            );
            return;
        };
        let (store, event_id) = (self.store.clone(), std::mem::take(&mut self.event_id));
        let event_type = std::mem::take(&mut self.event_type);
        let (settlement, retention, timeout) = (self.on_drop, self.retention, self.timeout);
        let span = tracing::Span::current();
        runtime.spawn(tracing::Instrument::instrument(
            async move {
                settle(&*store, &event_id, &event_type, &token, settlement, retention, timeout).await;
            },
            span,
        ));
    }
}

async fn settle(
    store: &dyn IdempotencyStore,
    event_id: &str,
    event_type: &str,
    token: &ClaimToken,
    settlement: Settle,
    retention: Duration,
    timeout: Duration,
) {
    let operation = async {
        match settlement {
            Settle::Complete => store.complete(event_id, event_type, token, retention).await,
            Settle::Release => store.release(event_id, token).await,
        }
    };
    match tokio::time::timeout(timeout, operation).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => tracing::warn!(
            event_id,
            ?settlement,
            "the claim was no longer ours (its lease expired and another delivery took it over)"
        ),
        Ok(Err(error)) => tracing::error!(
            event_id,
            ?settlement,
            error = %ErrorChain(&error),
            "could not settle the claim; the event may be processed again on redelivery"
        ),
        Err(_) => tracing::error!(
            event_id,
            ?settlement,
            ?timeout,
            "the store did not settle the claim in time; the event may be processed again on redelivery"
        ),
    }
}
