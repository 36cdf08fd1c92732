//! The claim guard: every store call of one delivery, each under its deadline; the handler run
//! to its end whatever the provider's connection does, while the layer's renewer renews the
//! claim from another task; and the claim settled whatever happens to the delivery.

use std::{
    any::Any,
    future::{Future, poll_fn},
    panic::AssertUnwindSafe,
    pin::{Pin, pin},
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::Response;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

use crate::{
    Outcome, SanghoEvent,
    error_chain::ErrorChain,
    event::{DeliveryClaim, SharedText},
    layer::Config,
    renewal::{Renewals, later},
    store::{Claim, ClaimToken, Claimant, Completion, Renewal, StoreError},
};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a handler's run gave: its output, or the payload of its panic.
type HandlerOutput<B, E> = Result<Result<Response<B>, E>, Box<dyn Any + Send>>;

/// One delivery's claim on one event: the event, the token the layer drew for it, and the
/// settings. Cheap to clone into a background task.
#[derive(Clone)]
pub(crate) struct ClaimOf {
    pub(crate) config: Arc<Config>,
    pub(crate) event_id: SharedText,
    event_type: SharedText,
    token: ClaimToken,
    /// What the handler sees of the claim; set before the handler is called.
    delivery: Option<DeliveryClaim>,
}

/// What a guard dropped before it was settled does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnDrop {
    /// Nothing is owed: the claim was not acquired, or it was settled.
    Nothing,
    /// Release the claim (the handler did not succeed, or its task was cancelled).
    Release,
    /// Complete the event (the handler succeeded; only the completion was interrupted).
    Complete,
}

/// How the completion of a processed event went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settled {
    /// The event is recorded as completed.
    Completed,
    /// Another delivery holds or completed the event: this one's claim had been taken over.
    TakenOver,
    /// The first attempt failed; the layer keeps retrying in the background.
    Retrying,
}

/// How the handler's run ended, once its claim is settled.
pub(crate) enum Processed<B, E> {
    /// The handler answered; its answer settled the claim as the outcome says.
    Answered(Response<B>, Outcome),
    /// The handler returned an error: the claim was released.
    Failed(E),
    /// The handler panicked: the claim was released.
    Panicked,
}

/// Owns a delivery's claim from before it is made until it is settled.
///
/// Dropped unsettled, it settles in a background task of the layer's: a claim still waiting
/// for its answer (the provider went away) is awaited and then released; an acquired claim is
/// released, or, when the handler had already succeeded, completed with its retries.
pub(crate) struct ClaimGuard {
    claim: ClaimOf,
    on_drop: OnDrop,
    /// The claim, while its answer has not come: dropped with the guard, it is finished in the
    /// background, so that it never lands after its own release.
    unanswered: Option<BoxFuture<Result<Claim, StoreError>>>,
    /// The claim's renewals, while the handler runs.
    renewals: Option<Renewals>,
}

impl ClaimGuard {
    /// A guard for a claim of `event` under a fresh token.
    pub(crate) fn new(config: &Arc<Config>, event: &SanghoEvent) -> Self {
        let (event_id, event_type) = event.shared_id_and_type();
        Self {
            claim: ClaimOf {
                config: config.clone(),
                event_id,
                event_type,
                token: ClaimToken::generate(),
                delivery: None,
            },
            on_drop: OnDrop::Nothing,
            unanswered: None,
            renewals: None,
        }
    }

    /// The claim as the handler sees it: its token, and whether a transaction of the
    /// handler's holds the completion (then the claim is not renewed meanwhile).
    pub(crate) fn delivery_claim(&mut self) -> DeliveryClaim {
        self.claim
            .delivery
            .get_or_insert_with(|| DeliveryClaim::new(self.claim.token))
            .clone()
    }

    /// Claims the event, under the store timeout. Only an acquired claim stays armed.
    ///
    /// A claim that failed may have been applied, and is released in the background. A claim
    /// that timed out is left to finish in the background, then released if it was acquired:
    /// so a claim the store answers late never lands after its own release.
    pub(crate) async fn claim(&mut self) -> Result<Claim, StoreError> {
        let claim = self.claim.clone();
        let limit = claim.config.store_timeout;
        let pending = self
            .unanswered
            .insert(Box::pin(async move { claim.claim().await }));
        let answer = match poll_once(pending.as_mut()).await {
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => timeout(limit, pending).await.ok(),
        };
        let unanswered = self.unanswered.take();
        let Some(answer) = answer else {
            // Still unanswered: finish it in the background, then release it.
            let unanswered = unanswered.expect("just inserted");
            let runtime = tokio::runtime::Handle::current();
            self.claim.release_in_background(unanswered, &runtime);
            return Err(StoreError::Timeout(limit));
        };
        self.on_drop = match answer {
            Ok(Claim::Acquired) | Err(_) => OnDrop::Release,
            Ok(_) => OnDrop::Nothing,
        };
        answer
    }

    /// Runs the handler and settles the claim with its answer.
    ///
    /// The handler and the settlement run to their end whether or not this future is polled
    /// to its own: when the provider hangs up, the handler is moved to a task of its own and
    /// keeps running, its claim renewed, and its answer completes or releases the event as
    /// usual. The claim is renewed by the layer's renewer, another task than the handler's, so
    /// a handler that blocks its thread (on a multi-threaded runtime) is still renewed.
    pub(crate) async fn process<F, B, E>(mut self, handler: F) -> Processed<B, E>
    where
        F: Future<Output = Result<Response<B>, E>> + Send + 'static,
        B: Send + 'static,
        E: Send + 'static,
    {
        let config = self.claim.config.clone();
        let limit = config.max_processing_time;
        let (renewals, started) = config.renewer.register(self.claim.clone(), limit);
        self.renewals = Some(renewals);
        if started {
            tokio::task::yield_now().await;
        }
        let mut running = Running {
            handler: Some(Box::pin(handler)),
            guard: Some(self),
            _running: config.tasks.token(),
        };
        let output = poll_fn(|cx| running.poll_handler(cx)).await;
        let guard = running
            .guard
            .take()
            .expect("the guard until the handler answers");
        guard.settle(output).await
    }

    /// Settles the claim with the handler's answer: a 2xx completes the event, anything else
    /// releases it. A renewal on its way lands first.
    async fn settle<B, E>(mut self, output: HandlerOutput<B, E>) -> Processed<B, E> {
        let event_id = self.claim.event_id.clone();
        let succeeded = matches!(&output, Ok(Ok(response)) if response.status().is_success());
        self.on_drop = match succeeded {
            true => OnDrop::Complete,
            false => OnDrop::Release,
        };
        if let Some(renewals) = self.renewals.take() {
            renewals.withdraw().await;
        }
        match output {
            Ok(Ok(response)) if succeeded => {
                let outcome = match self.complete().await {
                    Settled::Completed => {
                        tracing::debug!(%event_id, "processed and recorded as completed");
                        Outcome::Processed
                    }
                    Settled::Retrying => Outcome::CompletionFailed,
                    Settled::TakenOver => Outcome::TakenOver,
                };
                Processed::Answered(response, outcome)
            }
            Ok(Ok(response)) => {
                tracing::warn!(
                    %event_id,
                    status = response.status().as_u16(),
                    "the handler did not succeed; releasing the claim for the next delivery"
                );
                self.release().await;
                Processed::Answered(response, Outcome::HandlerFailed)
            }
            Ok(Err(error)) => {
                tracing::warn!(
                    %event_id,
                    outcome = "handler_error",
                    "the handler failed with an error; releasing the claim for the next delivery"
                );
                self.release().await;
                Processed::Failed(error)
            }
            Err(_panic) => {
                tracing::error!(
                    %event_id,
                    "the handler panicked; releasing the claim for the next delivery"
                );
                self.release().await;
                Processed::Panicked
            }
        }
    }

    /// The handler succeeded: records the event as completed. The first attempt is awaited;
    /// if it fails, the attempts go on in the background (the claim still renewed) for the
    /// configured completion-retry time.
    async fn complete(&mut self) -> Settled {
        self.on_drop = OnDrop::Complete;
        let settled = match self.claim.complete().await {
            Ok(Completion::Recorded) => Settled::Completed,
            Ok(_) => {
                self.claim.taken_over("complete");
                Settled::TakenOver
            }
            Err(error) => {
                tracing::warn!(
                    event_id = %self.claim.event_id,
                    error = %ErrorChain(&error),
                    "could not record the event as completed; retrying in the background"
                );
                let claim = self.claim.clone();
                self.claim
                    .config
                    .tasks
                    .spawn(claim.complete_with_retries().in_current_span());
                Settled::Retrying
            }
        };
        self.on_drop = OnDrop::Nothing;
        settled
    }

    /// The handler did not succeed: releases the claim, so that the next delivery processes
    /// the event.
    async fn release(&mut self) {
        self.on_drop = OnDrop::Nothing;
        self.claim.release().await;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let on_drop = std::mem::replace(&mut self.on_drop, OnDrop::Nothing);
        let unanswered = self.unanswered.take();
        let renewals = self.renewals.take();
        if on_drop == OnDrop::Nothing && unanswered.is_none() {
            return;
        }
        if unanswered.is_some() {
            tracing::warn!(
                event_id = %self.claim.event_id,
                outcome = "hung_up",
                "the provider went away while the event was being claimed; the claim is \
                 finished and released in the background"
            );
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                event_id = %self.claim.event_id,
                "no runtime to settle the claim on; it will expire with its lease"
            );
            return;
        };
        if let Some(unanswered) = unanswered {
            return self.claim.release_in_background(unanswered, &runtime);
        }
        let claim = self.claim.clone();
        let settle = async move {
            if let Some(renewals) = renewals {
                renewals.withdraw().await;
            }
            match on_drop {
                OnDrop::Complete => claim.complete_with_retries().await,
                _ => claim.release().await,
            }
        };
        let tasks = &self.claim.config.tasks;
        tasks.spawn_on(settle.in_current_span(), &runtime);
    }
}

/// A handler run in its delivery's future. Dropped before the handler answered (the provider
/// hung up), it moves the handler and its claim to a task of the layer's, where the handler
/// runs to its end and its answer settles the claim.
struct Running<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    B: Send + 'static,
    E: Send + 'static,
{
    handler: Option<Pin<Box<F>>>,
    guard: Option<ClaimGuard>,
    /// Counts this run among those `drain` waits for.
    _running: TaskTrackerToken,
}

impl<F, B, E> Running<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    B: Send + 'static,
    E: Send + 'static,
{
    /// Polls the handler, catching its panic.
    fn poll_handler(&mut self, cx: &mut Context<'_>) -> Poll<HandlerOutput<B, E>> {
        let handler = self.handler.as_mut().expect("polled until it answers");
        let output = poll_caught(handler.as_mut(), cx);
        if output.is_ready() {
            self.handler = None;
        }
        output
    }
}

impl<F, B, E> Drop for Running<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    B: Send + 'static,
    E: Send + 'static,
{
    fn drop(&mut self) {
        let (Some(handler), Some(guard)) = (self.handler.take(), self.guard.take()) else {
            return;
        };
        let event_id = &guard.claim.event_id;
        tracing::warn!(
            %event_id,
            outcome = "hung_up",
            "the provider went away before the answer; the handler keeps running, and its \
             answer completes or releases the event"
        );
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tasks = guard.claim.config.tasks.clone();
        let run_on = async move {
            let mut handler = handler;
            let output = poll_fn(|cx| poll_caught(handler.as_mut(), cx)).await;
            let _ = guard.settle(output).await;
        };
        tasks.spawn_on(run_on.in_current_span(), &runtime);
    }
}

/// Polls `future`, turning a panic into its payload.
fn poll_caught<F: Future + ?Sized>(
    future: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<Result<F::Output, Box<dyn Any + Send>>> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
        Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(panic) => Poll::Ready(Err(panic)),
    }
}

impl ClaimOf {
    /// This delivery, as the store's operations name it.
    fn claimant(&self) -> Claimant<'_> {
        Claimant::new(
            self.event_id.as_str(),
            self.event_type.as_str(),
            &self.token,
        )
    }

    async fn claim(&self) -> Result<Claim, StoreError> {
        self.config
            .store
            .claim(self.claimant(), self.config.lease)
            .await
    }

    async fn complete(&self) -> Result<Completion, StoreError> {
        let complete = self
            .config
            .store
            .complete(self.claimant(), self.config.retention);
        timed(self.config.store_timeout, complete).await
    }

    async fn release(&self) {
        let release = self.config.store.release(self.claimant());
        match timed(self.config.store_timeout, release).await {
            Ok(_) => {}
            Err(error) => tracing::warn!(
                event_id = %self.event_id,
                error = %ErrorChain(&error),
                "could not release the claim; the next delivery waits for its lease to expire"
            ),
        }
    }

    /// Runs [`release_when_answered`](Self::release_when_answered) in a task of the layer's.
    fn release_in_background(
        &self,
        unanswered: BoxFuture<Result<Claim, StoreError>>,
        runtime: &tokio::runtime::Handle,
    ) {
        let claim = self.clone();
        let release = async move { claim.release_when_answered(unanswered).await };
        self.config
            .tasks
            .spawn_on(release.in_current_span(), runtime);
    }

    /// A claim the store has not answered yet (it timed out, or its delivery went away): waits
    /// for its answer, for at most a lease and a store timeout more, then releases it unless
    /// the store said another delivery holds or completed the event.
    async fn release_when_answered(&self, unanswered: BoxFuture<Result<Claim, StoreError>>) {
        let patience = self.config.lease.saturating_add(self.config.store_timeout);
        match timeout(patience, unanswered).await {
            Ok(Ok(Claim::Completed | Claim::InFlight)) => {}
            Ok(_) => self.release().await,
            Err(_) => {
                tracing::warn!(
                    event_id = %self.event_id,
                    waited = ?patience,
                    "the store never answered a claim; releasing it in case it was applied"
                );
                self.release().await;
            }
        }
    }

    pub(crate) async fn renew(&self, limit: Duration) -> Result<Renewal, StoreError> {
        let renew = self.config.store.renew(self.claimant(), self.config.lease);
        timed(limit, renew).await
    }

    /// Whether the handler's own transaction holds the completion (and its row's lock).
    pub(crate) fn completion_held(&self) -> bool {
        self.delivery
            .as_ref()
            .is_some_and(DeliveryClaim::completion_held)
    }

    pub(crate) fn taken_over(&self, operation: &str) {
        tracing::error!(
            event_id = %self.event_id,
            operation,
            "another delivery holds or completed the event: this delivery's claim was taken \
             over (its lease ran out), so the event may have been processed twice"
        );
    }

    /// Retries the completion with backoff, renewing the claim meanwhile, until it succeeds
    /// or the completion-retry time runs out.
    async fn complete_with_retries(self) {
        let limit = self.config.completion_retry;
        let retries = async {
            let deadline = later(Instant::now(), limit);
            let mut backoff = Duration::from_millis(100);
            loop {
                match self.complete().await {
                    Ok(Completion::Recorded) => {
                        tracing::info!(event_id = %self.event_id, "the event is recorded as completed after a retry");
                        return;
                    }
                    Ok(_) => return self.taken_over("complete"),
                    Err(error) if later(Instant::now(), backoff) >= deadline => {
                        tracing::error!(
                            event_id = %self.event_id,
                            error = %ErrorChain(&error),
                            retried_for = ?limit,
                            "gave up recording the processed event as completed; a redelivery \
                             after the lease may process it again"
                        );
                        return;
                    }
                    Err(error) => tracing::debug!(
                        event_id = %self.event_id,
                        error = %ErrorChain(&error),
                        ?backoff,
                        "completion failed; retrying"
                    ),
                }
                sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        };
        let (renewals, _) = self.config.renewer.register(self.clone(), limit);
        retries.await;
        renewals.withdraw().await;
    }
}

/// `operation`, failing with [`StoreError::Timeout`] after `limit`. An operation that is ready
/// when first polled (an in-memory store) never starts the timer.
async fn timed<T>(
    limit: Duration,
    operation: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let mut operation = pin!(operation);
    if let Poll::Ready(output) = poll_once(operation.as_mut()).await {
        return output;
    }
    timeout(limit, operation)
        .await
        .unwrap_or(Err(StoreError::Timeout(limit)))
}

/// Polls `future` once, in the caller's task: its output if it is ready at once.
async fn poll_once<F: Future + ?Sized>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}
