//! [`InboxWorker`]: takes due events from an [`Inbox`] and runs the handler on each, under a
//! renewed lease.

use std::{
    error::Error as StdError,
    fmt,
    future::poll_fn,
    sync::Arc,
    time::{Duration, SystemTime},
};

use http::{Method, Request, Response, Uri};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tokio::time::{Instant, sleep, timeout};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower_service::Service;
use tracing::Instrument;

use super::{
    AttemptOutcome, FailedAttempt, Failure, Inbox, NextAttempt, RetryPolicy, TakeOrder, TakenEvent,
    WorkerMetrics,
};
use crate::{
    ConfigError, DeliveryClaim, SanghoEvent, WebhookBody,
    error_chain::ErrorChain,
    store::{ClaimToken, Completion, Renewal},
};

type BoxError = Box<dyn StdError + Send + Sync>;

/// The most of an error or a response body recorded per failed attempt, in bytes.
const ERROR_EXCERPT: usize = 512;
/// The longest pause after the inbox failed, before the next take.
const MAX_STORE_BACKOFF: Duration = Duration::from_secs(5);

/// In the extensions of every request an [`InboxWorker`] sends its handler: which attempt this
/// is, and when the event was received. A [`SanghoWebhookLayer`](crate::SanghoWebhookLayer)
/// that sees it refuses the request (500 `inbox_worker_request`): the worker's service is the
/// handlers alone, never behind the layer.
///
/// ```
/// use sangho_webhook::inbox::InboxDelivery;
///
/// # fn handle(request: http::Request<sangho_webhook::WebhookBody>) {
/// if let Some(delivery) = request.extensions().get::<InboxDelivery>() {
///     println!("attempt {}", delivery.attempt());
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxDelivery {
    attempt: u32,
    received_at: SystemTime,
}

impl InboxDelivery {
    /// This attempt's number: 1 for the first (counted since the last replay).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the receipt stored the event.
    pub fn received_at(&self) -> SystemTime {
        self.received_at
    }
}

/// Runs the handler on the events of an [`Inbox`]: several tasks, each taking the next due
/// event (new events first, then retries, each in the order of receipt: [`TakeOrder`]; the
/// events of one ordering key one at a time) under a lease with a fresh token, renewing it
/// every third of the lease while the handler runs, and settling it by the handler's answer:
/// a 2xx completes the event; anything else, an error or a panic is a failed attempt, due
/// again by the [`RetryPolicy`] or dead. A task takes its next event while the last one's
/// settlement is written (a store that groups concurrent writes, as the SQL stores do, then
/// writes the two together); the shutdown waits for the settlements too.
///
/// The handler is the direct mode's: a service of `Request<WebhookBody>` (an axum `Router`
/// works), called with method `POST`, the path the event was received on, the stored headers
/// and body, and the [`SanghoEvent`] (with its claim) and an [`InboxDelivery`] in the
/// extensions.
///
/// ```
/// use axum::{Router, routing::post};
/// use sangho_webhook::{SanghoEvent, inbox::{InboxWorker, MemoryInbox}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// async fn handle(event: SanghoEvent) -> &'static str {
///     tracing::info!(id = event.id(), "processing");
///     "ok"
/// }
/// let inbox = MemoryInbox::new();
/// let handlers: Router = Router::new().route("/webhooks/sangho", post(handle));
/// let worker = InboxWorker::builder(inbox, handlers).with_concurrency(4).build()?.start();
/// // ... serve; then, at shutdown:
/// worker.shutdown(std::time::Duration::from_secs(30)).await;
/// # Ok(())
/// # }
/// ```
pub struct InboxWorker<S> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    inbox: Arc<dyn Inbox>,
    service: S,
    concurrency: usize,
    lease: Duration,
    retention: Duration,
    poll_interval: Duration,
    store_timeout: Duration,
    max_processing_time: Duration,
    retry: RetryPolicy,
    take_order: TakeOrder,
    metrics: WorkerMetrics,
    /// Stops the takes (the shutdown began).
    stop_taking: CancellationToken,
    /// Abandons the handlers still running (the shutdown's deadline passed).
    abandon: CancellationToken,
    /// Wakes the idle tasks when an event this worker failed is due again, so that a retry
    /// does not wait for the poll interval.
    retry_due: tokio::sync::Notify,
    /// The worker's tasks, and the settlements they write in the background.
    tasks: TaskTracker,
}

impl InboxWorker<()> {
    /// The default number of events handled at once: 4.
    pub const DEFAULT_CONCURRENCY: usize = 4;
    /// The default lease: 30 s, renewed every third of it while the handler runs.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// The default retention of a completed event: 72 h, beyond the provider's 48 hours of
    /// redeliveries.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(72 * 3600);
    /// The default pause between takes when nothing is due and no notification came: 1 s.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
    /// The default time an inbox operation may take: 5 s.
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default time a handler's lease is renewed for: 10 min.
    pub const DEFAULT_MAX_PROCESSING_TIME: Duration = Duration::from_secs(600);
}

impl<S> InboxWorker<S> {
    /// A builder with the defaults, taking events from `inbox` and handing them to `service`.
    pub fn builder(inbox: impl Inbox, service: S) -> InboxWorkerBuilder<S> {
        InboxWorkerBuilder {
            inbox: Arc::new(inbox),
            service,
            concurrency: InboxWorker::DEFAULT_CONCURRENCY,
            lease: InboxWorker::DEFAULT_LEASE,
            retention: InboxWorker::DEFAULT_RETENTION,
            poll_interval: InboxWorker::DEFAULT_POLL_INTERVAL,
            store_timeout: InboxWorker::DEFAULT_STORE_TIMEOUT,
            max_processing_time: InboxWorker::DEFAULT_MAX_PROCESSING_TIME,
            retry: RetryPolicy::default(),
            take_order: TakeOrder::default(),
        }
    }

    /// What this worker has done: attempts by outcome, dead letters, its last take.
    pub fn metrics(&self) -> WorkerMetrics {
        self.shared.metrics.clone()
    }
}

/// Builds an [`InboxWorker`]; [`build`](Self::build) refuses settings that cannot work.
///
/// | setting | default | builder |
/// | --- | --- | --- |
/// | events handled at once | 4 | [`with_concurrency`](Self::with_concurrency) |
/// | lease | 30 s, renewed every third | [`with_lease`](Self::with_lease) |
/// | maximum processing time | 10 min | [`with_max_processing_time`](Self::with_max_processing_time) |
/// | retries and dead letters | [`RetryPolicy::default`] | [`with_retry_policy`](Self::with_retry_policy) |
/// | retention of a completed event | 72 h | [`with_retention`](Self::with_retention) |
/// | poll interval (no notification) | 1 s | [`with_poll_interval`](Self::with_poll_interval) |
/// | store timeout | 5 s | [`with_store_timeout`](Self::with_store_timeout) |
/// | which due event first | new events, then retries: [`TakeOrder::FreshFirst`] | [`with_take_order`](Self::with_take_order) |
#[must_use]
pub struct InboxWorkerBuilder<S> {
    inbox: Arc<dyn Inbox>,
    service: S,
    concurrency: usize,
    lease: Duration,
    retention: Duration,
    poll_interval: Duration,
    store_timeout: Duration,
    max_processing_time: Duration,
    retry: RetryPolicy,
    take_order: TakeOrder,
}

impl<S> InboxWorkerBuilder<S> {
    /// Handles up to `concurrency` events at once (at least 1).
    ///
    /// Each of the `concurrency` tasks takes one event at a time. A store that groups its
    /// writes (the SQL stores) takes and settles the events of every waiting task together,
    /// so with short handlers more tasks drain faster: on the project's two-core benchmark
    /// machine, with a handler that does nothing, 64 tasks drained SQLite at 1.5x the rate the
    /// same database received events over HTTP at 64 connections, PostgreSQL at 1.55x–1.70x
    /// (16 tasks: 0.9x–1.1x) and MariaDB at 1.0x. Size it by what your handlers can run at
    /// once (each may hold a connection of your own).
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Holds each taken event for `lease` (at least 1 s, at most 1 h), renewed every third of
    /// it while the handler runs. After a crash, the event waits this long before another
    /// worker takes it over.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Renews a handler's lease for at most `limit` (at least 1 s); a handler still running
    /// after it is logged at `error`, and another worker may take its event over after the
    /// lease.
    pub fn with_max_processing_time(mut self, limit: Duration) -> Self {
        self.max_processing_time = limit;
        self
    }

    /// Retries failed events and makes them dead by `policy`.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Remembers a completed event for `retention` (as a duplicate for redeliveries; the
    /// purge deletes it after).
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Takes again after `interval` when nothing was due and no notification came (at least
    /// 10 ms): the wake-up across processes on stores without notifications.
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Takes the due events in `order`: by default new events before retries
    /// ([`TakeOrder::FreshFirst`]), so that a backlog of failing events never delays a new one
    /// by more than one handler run.
    pub fn with_take_order(mut self, order: TakeOrder) -> Self {
        self.take_order = order;
        self
    }

    /// Gives each inbox operation at most `timeout` (at least 1 s).
    pub fn with_store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// The worker, not started yet, or the first setting that cannot work.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting.
    pub fn build(self) -> Result<InboxWorker<S>, ConfigError> {
        let second = Duration::from_secs(1);
        if self.lease < second {
            return Err(ConfigError::LeaseTooShort(self.lease));
        }
        if self.lease > crate::SanghoWebhookLayer::MAX_LEASE {
            return Err(ConfigError::LeaseTooLong(self.lease));
        }
        if self.store_timeout < second {
            return Err(ConfigError::StoreTimeoutTooShort(self.store_timeout));
        }
        if self.max_processing_time < second {
            return Err(ConfigError::MaxProcessingTimeTooShort(
                self.max_processing_time,
            ));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::NoWorkers);
        }
        if self.retention <= self.lease {
            return Err(ConfigError::LeaseNotUnderRetention {
                lease: self.lease,
                retention: self.retention,
            });
        }
        Ok(InboxWorker {
            shared: Arc::new(Shared {
                inbox: self.inbox,
                service: self.service,
                concurrency: self.concurrency,
                lease: self.lease,
                retention: self.retention,
                poll_interval: self.poll_interval.max(Duration::from_millis(10)),
                store_timeout: self.store_timeout,
                max_processing_time: self.max_processing_time,
                retry: self.retry,
                take_order: self.take_order,
                metrics: WorkerMetrics::default(),
                stop_taking: CancellationToken::new(),
                abandon: CancellationToken::new(),
                retry_due: tokio::sync::Notify::new(),
                tasks: TaskTracker::new(),
            }),
        })
    }
}

/// A started [`InboxWorker`]: [`shutdown`](Self::shutdown) stops it.
#[must_use = "dropping the handle leaves the worker running until the runtime ends"]
pub struct WorkerHandle {
    stop_taking: CancellationToken,
    abandon: CancellationToken,
    tasks: TaskTracker,
    metrics: WorkerMetrics,
}

impl WorkerHandle {
    /// What the worker has done: attempts by outcome, dead letters, its last take.
    pub fn metrics(&self) -> WorkerMetrics {
        self.metrics.clone()
    }

    /// Stops taking events, waits up to `deadline` for the handlers still running (and the
    /// settlements being written), then abandons the others: each is due again at once, and
    /// its attempt does not count. Answers whether every handler finished within the
    /// deadline.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        self.stop_taking.cancel();
        self.tasks.close();
        let finished = timeout(deadline, self.tasks.wait()).await.is_ok();
        if !finished {
            tracing::warn!(
                ?deadline,
                "inbox handlers still running at the shutdown deadline; abandoning their events"
            );
            self.abandon.cancel();
            self.tasks.wait().await;
        }
        finished
    }
}

impl<S, ResBody> InboxWorker<S>
where
    S: Service<Request<WebhookBody>, Response = Response<ResBody>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    ResBody: Body + Send + 'static,
    ResBody::Data: Send,
    ResBody::Error: Into<BoxError>,
{
    /// Starts the worker's tasks on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(self) -> WorkerHandle {
        let tasks = self.shared.tasks.clone();
        for slot in 0..self.shared.concurrency {
            let shared = self.shared.clone();
            let span = tracing::info_span!("sangho_inbox_worker", slot);
            tasks.spawn(shared.run().instrument(span));
        }
        WorkerHandle {
            stop_taking: self.shared.stop_taking.clone(),
            abandon: self.shared.abandon.clone(),
            tasks,
            metrics: self.shared.metrics.clone(),
        }
    }
}

/// What an attempt came to, to write in the inbox.
enum Settlement {
    /// The handler answered 2xx.
    Completed,
    /// A failed attempt: the excerpt to record, and when the event is due again.
    Failed(String, NextAttempt),
    /// The shutdown's deadline passed before the handler answered.
    Abandoned,
}

/// How a handler's run ended.
enum Ran {
    /// A 2xx.
    Succeeded,
    /// Anything else: the excerpt to record.
    Failed(String),
    /// The shutdown's deadline passed first.
    Abandoned,
}

impl<S, ResBody> Shared<S>
where
    S: Service<Request<WebhookBody>, Response = Response<ResBody>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    ResBody: Body + Send + 'static,
    ResBody::Data: Send,
    ResBody::Error: Into<BoxError>,
{
    /// One task: take, handle, settle, until the shutdown.
    async fn run(self: Arc<Self>) {
        let mut store_backoff = Duration::ZERO;
        while !self.stop_taking.is_cancelled() {
            let token = ClaimToken::generate();
            let take = self.inbox.take(&token, self.lease, self.take_order);
            match timeout(self.store_timeout, take).await {
                Ok(Ok(Some(taken))) => {
                    store_backoff = Duration::ZERO;
                    self.metrics.took();
                    let span = tracing::info_span!(
                        "sangho_inbox_event",
                        event_id = %taken.event_id,
                        event_type = %taken.event_type,
                        attempt = taken.attempt
                    );
                    let settlement = self.attempt(&taken).instrument(span.clone()).await;
                    let settle = self.clone().settle(taken, settlement).instrument(span);
                    if self.stop_taking.is_cancelled() {
                        settle.await;
                    } else {
                        // The task takes its next event while this one's settlement is
                        // written: a store that groups its writes commits the two together.
                        self.tasks.spawn(settle);
                    }
                }
                Ok(Ok(None)) => {
                    store_backoff = Duration::ZERO;
                    tokio::select! {
                        () = self.stop_taking.cancelled() => {}
                        () = self.inbox.wait_for_events(self.poll_interval) => {}
                        () = self.retry_due.notified() => {}
                    }
                }
                failed => {
                    store_backoff = (store_backoff * 2)
                        .max(Duration::from_millis(100))
                        .min(MAX_STORE_BACKOFF);
                    match failed {
                        Ok(Err(error)) => tracing::warn!(
                            error = %ErrorChain(&error),
                            retry_in = ?store_backoff,
                            "the inbox failed to hand out an event"
                        ),
                        _ => tracing::warn!(
                            retry_in = ?store_backoff,
                            "the inbox did not hand out an event in time"
                        ),
                    }
                    tokio::select! {
                        () = self.stop_taking.cancelled() => {}
                        () = sleep(store_backoff) => {}
                    }
                }
            }
        }
    }

    /// One attempt at one event: runs the handler, and answers how to settle the event.
    async fn attempt(&self, taken: &TakenEvent) -> Settlement {
        let now = SystemTime::now();
        if taken.attempt > 1
            && self
                .retry
                .is_exhausted(taken.attempt - 1, taken.budget_start, now)
        {
            // The last attempt lost its lease, and was the last one allowed.
            return Settlement::Failed("the lease ran out".to_owned(), NextAttempt::Dead);
        }
        let Ok(event) = SanghoEvent::parse(taken.body.clone()) else {
            let error = "the stored body is not an event".to_owned();
            return Settlement::Failed(error, NextAttempt::Dead);
        };
        let claim = DeliveryClaim::new(taken.token);
        let request = self.request(taken, event.with_claim(claim.clone()));
        match self.run_handler(taken, &claim, request).await {
            Ran::Succeeded => Settlement::Completed,
            Ran::Failed(error) => {
                let next = self
                    .retry
                    .next(taken.attempt, taken.budget_start, SystemTime::now());
                Settlement::Failed(error, next)
            }
            Ran::Abandoned => Settlement::Abandoned,
        }
    }

    /// Writes what the attempt at `taken` came to.
    async fn settle(self: Arc<Self>, taken: TakenEvent, settlement: Settlement) {
        match settlement {
            Settlement::Completed => self.complete(&taken).await,
            Settlement::Failed(error, next) => self.settle_failure(&taken, &error, next).await,
            Settlement::Abandoned => self.abandon(&taken).await,
        }
    }

    /// The direct mode's request, rebuilt from the stored row.
    fn request(&self, taken: &TakenEvent, event: SanghoEvent) -> Request<WebhookBody> {
        let mut request = Request::new(WebhookBody::new(taken.body.clone()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = taken
            .path
            .parse::<Uri>()
            .unwrap_or_else(|_| Uri::from_static("/"));
        for (name, value) in &taken.headers {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::try_from(name.as_str()),
                http::HeaderValue::try_from(value.as_str()),
            ) {
                request.headers_mut().append(name, value);
            }
        }
        request.extensions_mut().insert(event);
        request.extensions_mut().insert(InboxDelivery {
            attempt: taken.attempt,
            received_at: taken.received_at,
        });
        request
    }

    /// Runs the handler in a task of its own (a panic is an answer, not the worker's end),
    /// renewing the lease until it answers or the shutdown's deadline passes.
    async fn run_handler(
        &self,
        taken: &TakenEvent,
        claim: &DeliveryClaim,
        request: Request<WebhookBody>,
    ) -> Ran {
        let mut service = self.service.clone();
        let mut handler = tokio::spawn(async move {
            poll_fn(|cx| service.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            let response = service.call(request).await.map_err(Into::into)?;
            Ok::<_, BoxError>(answer_of(response).await)
        });
        let started = Instant::now();
        let mut renewals = tokio::time::interval_at(started + self.lease / 3, self.lease / 3);
        let mut renewing = true;
        loop {
            tokio::select! {
                joined = &mut handler => return match joined {
                    Ok(Ok(None)) => Ran::Succeeded,
                    Ok(Ok(Some(failure))) => Ran::Failed(failure),
                    Ok(Err(error)) => Ran::Failed(excerpt(&format!("error: {}", ErrorChain(&*error)))),
                    Err(join) => Ran::Failed(excerpt(&format!("the handler panicked: {}", panic_message(join)))),
                },
                () = self.abandon.cancelled() => {
                    handler.abort();
                    return Ran::Abandoned;
                }
                _ = renewals.tick(), if renewing => {
                    if started.elapsed() >= self.max_processing_time {
                        tracing::error!(
                            limit = ?self.max_processing_time,
                            "the handler is still running after the maximum processing time; \
                             its lease is no longer renewed, and another worker may take the \
                             event over"
                        );
                        renewing = false;
                    } else if !claim.completion_held() {
                        self.renew(taken).await;
                    }
                }
            }
        }
    }

    async fn renew(&self, taken: &TakenEvent) {
        match timeout(
            self.store_timeout,
            self.inbox.renew(&taken.claimant(), self.lease),
        )
        .await
        {
            Ok(Ok(Renewal::Held)) => {}
            Ok(Ok(Renewal::TakenOver)) => tracing::warn!(
                "the event's lease was lost (another worker took it over); the handler runs on"
            ),
            Ok(Err(error)) => tracing::warn!(error = %ErrorChain(&error), "a renewal failed"),
            Err(_) => tracing::warn!("a renewal timed out"),
        }
    }

    /// Completes the event, retrying a failing store for up to a lease: after that, another
    /// worker may take the event over, and it may be processed again (logged at `error`).
    async fn complete(&self, taken: &TakenEvent) {
        let give_up = Instant::now() + self.lease;
        let mut pause = Duration::from_millis(50);
        loop {
            let completion = timeout(
                self.store_timeout,
                self.inbox.complete(&taken.claimant(), self.retention),
            )
            .await;
            match completion {
                Ok(Ok(Completion::Recorded)) => {
                    self.metrics.attempt(AttemptOutcome::Completed);
                    tracing::info!("processed");
                    return;
                }
                Ok(Ok(Completion::TakenOver)) => {
                    self.metrics.attempt(AttemptOutcome::LeaseLost);
                    tracing::warn!(
                        "processed, but another worker took the event over meanwhile: it may be \
                         processed twice"
                    );
                    return;
                }
                Ok(Err(error)) if Instant::now() < give_up => {
                    tracing::warn!(error = %ErrorChain(&error), "a completion failed; retrying");
                }
                Err(_) if Instant::now() < give_up => {
                    tracing::warn!("a completion timed out; retrying");
                }
                _ => {
                    tracing::error!(
                        "the completion failed for a whole lease; the event will be processed again"
                    );
                    return;
                }
            }
            sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    async fn settle_failure(self: &Arc<Self>, taken: &TakenEvent, error: &str, next: NextAttempt) {
        let attempt = FailedAttempt::new(error, next);
        match timeout(
            self.store_timeout,
            self.inbox.fail(&taken.claimant(), &attempt),
        )
        .await
        {
            Ok(Ok(Failure::Recorded)) => {
                self.metrics.attempt(AttemptOutcome::Failed);
                self.failure_recorded(taken, error, next);
            }
            Ok(Ok(Failure::NotHeld)) => {
                self.metrics.attempt(AttemptOutcome::LeaseLost);
                tracing::warn!(error, "attempt failed, and the lease was lost meanwhile")
            }
            Ok(Err(store)) => {
                self.metrics.attempt(AttemptOutcome::Failed);
                tracing::warn!(
                    error,
                    store_error = %ErrorChain(&store),
                    "attempt failed and could not be recorded; the event is due again after its lease"
                )
            }
            Err(_) => {
                self.metrics.attempt(AttemptOutcome::Failed);
                tracing::warn!(
                    error,
                    "attempt failed and its record timed out; the event is due again after its lease"
                )
            }
        }
    }

    fn failure_recorded(self: &Arc<Self>, taken: &TakenEvent, error: &str, next: NextAttempt) {
        match next {
            NextAttempt::After(delay) => {
                self.wake_after(delay);
                tracing::warn!(error, retry_in = ?delay, "attempt failed; the event is due again later");
            }
            NextAttempt::Dead => {
                self.metrics.dead();
                tracing::error!(
                    event_id = %taken.event_id,
                    event_type = %taken.event_type,
                    attempts = taken.attempt,
                    last_error = error,
                    "the event is dead: no more attempts until an operator replays it"
                )
            }
        }
    }

    /// Wakes an idle task once `delay` has passed (unless the worker stops first).
    fn wake_after(self: &Arc<Self>, delay: Duration) {
        let shared = Arc::downgrade(self);
        let stop = self.stop_taking.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = sleep(delay) => {
                    if let Some(shared) = shared.upgrade() {
                        shared.retry_due.notify_one();
                    }
                }
            }
        });
    }

    async fn abandon(&self, taken: &TakenEvent) {
        self.metrics.attempt(AttemptOutcome::Abandoned);
        match timeout(self.store_timeout, self.inbox.abandon(&taken.claimant())).await {
            Ok(Ok(_)) => tracing::info!("abandoned at shutdown; due again at once"),
            _ => tracing::warn!(
                "abandoned at shutdown, but the inbox did not record it; due again after the lease"
            ),
        }
    }
}

/// `None` for a 2xx; otherwise the status and the start of the body.
async fn answer_of<B>(response: Response<B>) -> Option<String>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let status = response.status();
    if status.is_success() {
        return None;
    }
    let body = Limited::new(response.into_body(), ERROR_EXCERPT)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    Some(excerpt(&format!(
        "status {}: {}",
        status.as_u16(),
        text.trim()
    )))
}

/// At most [`ERROR_EXCERPT`] bytes of `text`, cut at a character boundary.
fn excerpt(text: &str) -> String {
    let mut end = text.len().min(ERROR_EXCERPT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text payload".to_owned()),
        Err(join) => join.to_string(),
    }
}

impl<S> fmt::Debug for InboxWorker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.shared;
        f.debug_struct("InboxWorker")
            .field("concurrency", &shared.concurrency)
            .field("lease", &shared.lease)
            .field("retention", &shared.retention)
            .field("poll_interval", &shared.poll_interval)
            .field("store_timeout", &shared.store_timeout)
            .field("max_processing_time", &shared.max_processing_time)
            .field("retry", &shared.retry)
            .field("take_order", &shared.take_order)
            .finish_non_exhaustive()
    }
}

impl<S> fmt::Debug for InboxWorkerBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxWorkerBuilder")
            .field("concurrency", &self.concurrency)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("poll_interval", &self.poll_interval)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("running", &self.tasks.len())
            .finish_non_exhaustive()
    }
}
