//! What the inbox tests share: a receiver at the fixtures' time, a scripted handler, an inbox
//! whose faults can be switched on, and waiting for a condition.

#![allow(dead_code)]

use std::{
    collections::HashMap,
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use http::{Request, Response, StatusCode};
use sangho_webhook::{
    SanghoEvent, WebhookBody,
    inbox::{
        Discarded, EventRecord, EventSummary, FailedAttempt, Failure, Filter, Inbox, InboxDelivery,
        InboxReceiver, InboxStats, MemoryInbox, Receipt, ReceivedEvent, Replay, Replayed,
        TakeOrder, TakenEvent,
    },
    store::{ClaimToken, Claimant, Completion, Release, Renewal, StoreError, async_trait},
    testing::{Delivery, fixtures},
};
use tower::Service;

pub use fixtures::{EVENT_TYPE as TYPE, secret};

/// A receiver over `inbox` with the fixture secret at the fixtures' fixed time.
pub fn receiver(inbox: impl Inbox) -> InboxReceiver {
    InboxReceiver::builder(fixtures::secret(), inbox)
        .with_clock(fixtures::fixed_clock)
        .build()
        .expect("valid settings")
}

/// A signed delivery of `id`.
pub fn delivery(id: &str) -> Delivery {
    Delivery::event(id, TYPE).signed(&fixtures::secret(), fixtures::NOW)
}

/// One call the handler saw.
#[derive(Debug, Clone)]
pub struct Call {
    pub event_id: String,
    pub attempt: u32,
    pub path: String,
    pub method: http::Method,
    pub headers: http::HeaderMap,
    pub body: bytes::Bytes,
    pub at: Instant,
}

/// What the scripted handler does on a call.
#[derive(Debug, Clone, Copy)]
pub enum Act {
    Answer(StatusCode),
    Panic,
    Sleep(Duration),
}

/// Decides what the handler does with an event's attempt.
type Script = dyn Fn(&str, u32) -> Act + Send + Sync;

/// A handler that records every call and acts by a script: `act(event_id, attempt)`.
#[derive(Clone)]
pub struct Scripted {
    calls: Arc<Mutex<Vec<Call>>>,
    script: Arc<Script>,
}

impl Scripted {
    pub fn new(script: impl Fn(&str, u32) -> Act + Send + Sync + 'static) -> Self {
        Self {
            calls: Arc::default(),
            script: Arc::new(script),
        }
    }

    /// Answers 200 to everything.
    pub fn ok() -> Self {
        Self::new(|_, _| Act::Answer(StatusCode::OK))
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// How many calls each event had.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for call in self.calls() {
            *counts.entry(call.event_id).or_default() += 1;
        }
        counts
    }
}

impl Service<Request<WebhookBody>> for Scripted {
    type Response = Response<WebhookBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<WebhookBody>) -> Self::Future {
        let event = request
            .extensions()
            .get::<SanghoEvent>()
            .expect("the worker puts the event into the extensions")
            .clone();
        assert!(event.claim().is_some(), "the event carries its claim");
        let attempt = request
            .extensions()
            .get::<InboxDelivery>()
            .expect("the worker marks its requests")
            .attempt();
        self.calls.lock().unwrap().push(Call {
            event_id: event.id().to_owned(),
            attempt,
            path: request.uri().path().to_owned(),
            method: request.method().clone(),
            headers: request.headers().clone(),
            body: request.body().bytes(),
            at: Instant::now(),
        });
        let act = (self.script)(event.id(), attempt);
        Box::pin(async move {
            let status = match act {
                Act::Answer(status) => status,
                Act::Panic => panic!("the scripted handler panics"),
                Act::Sleep(duration) => {
                    tokio::time::sleep(duration).await;
                    StatusCode::OK
                }
            };
            let mut response = Response::new(WebhookBody::from_static(b"scripted answer"));
            *response.status_mut() = status;
            Ok(response)
        })
    }
}

/// Waits up to `limit` for `condition`, polling every 10 ms; panics with `what` otherwise.
pub async fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Receives `id` straight into the inbox, as the receiver would.
pub async fn receive(inbox: &dyn Inbox, id: &str) -> Receipt {
    let delivery = delivery(id);
    let body = delivery.body_bytes().clone();
    let headers = [("content-type".to_owned(), "application/json".to_owned())];
    let event = ReceivedEvent::new(id, TYPE, &body, &headers, "/webhooks/sangho");
    inbox.receive(&event).await.expect("a receipt")
}

/// An in-memory inbox whose operations fail while `down` is set, and that counts its takes.
#[derive(Clone, Default)]
pub struct FaultyInbox {
    pub inner: MemoryInbox,
    pub down: Arc<AtomicBool>,
    pub takes: Arc<AtomicUsize>,
    pub receipts: Arc<AtomicUsize>,
    /// Reports its receipts as not durable (a store with asynchronous commits).
    pub asynchronous: bool,
    /// Holds each completion until a take begins after it (for at most 5 s), as a store that
    /// writes concurrent operations together waits to gather them.
    pub completions_wait_for_a_take: bool,
}

impl FaultyInbox {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "down");
            return Err(StoreError::backend(io));
        }
        Ok(())
    }
}

#[async_trait]
impl Inbox for FaultyInbox {
    async fn receive(&self, event: &ReceivedEvent<'_>) -> Result<Receipt, StoreError> {
        self.receipts.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        self.inner.receive(event).await
    }
    async fn take(
        &self,
        token: &ClaimToken,
        lease: Duration,
        order: TakeOrder,
    ) -> Result<Option<TakenEvent>, StoreError> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        self.inner.take(token, lease, order).await
    }
    async fn renew(&self, claimant: &Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        self.check()?;
        self.inner.renew(claimant, lease).await
    }
    async fn complete(
        &self,
        claimant: &Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        self.check()?;
        if self.completions_wait_for_a_take {
            let takes = self.takes.load(Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.takes.load(Ordering::SeqCst) == takes && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        self.inner.complete(claimant, retention).await
    }
    async fn fail(
        &self,
        claimant: &Claimant<'_>,
        attempt: &FailedAttempt<'_>,
    ) -> Result<Failure, StoreError> {
        self.check()?;
        self.inner.fail(claimant, attempt).await
    }
    async fn abandon(&self, claimant: &Claimant<'_>) -> Result<Release, StoreError> {
        self.check()?;
        self.inner.abandon(claimant).await
    }
    async fn wait_for_events(&self, at_most: Duration) {
        self.inner.wait_for_events(at_most).await
    }
    fn receipts_are_durable(&self) -> bool {
        !self.asynchronous
    }
    async fn stats_by_type(&self) -> Result<Vec<(String, InboxStats)>, StoreError> {
        self.check()?;
        self.inner.stats_by_type().await
    }
    async fn stats(&self) -> Result<InboxStats, StoreError> {
        self.check()?;
        self.inner.stats().await
    }
    async fn list(&self, filter: &Filter) -> Result<Vec<EventSummary>, StoreError> {
        self.inner.list(filter).await
    }
    async fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
        self.inner.count(filter).await
    }
    async fn show(&self, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
        self.inner.show(event_id).await
    }
    async fn replay(&self, event_id: &str, replay: &Replay) -> Result<Replayed, StoreError> {
        self.inner.replay(event_id, replay).await
    }
    async fn discard(&self, event_id: &str) -> Result<Discarded, StoreError> {
        self.inner.discard(event_id).await
    }
    async fn purge_completed(&self, limit: u32) -> Result<u64, StoreError> {
        self.inner.purge_completed(limit).await
    }
}
