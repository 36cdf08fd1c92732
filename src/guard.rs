//! The claim guard: every store call of one delivery, each under its deadline; the handler run
//! in a task of its own, detached from the provider's connection, while the claim is renewed
//! from another task; and the claim settled whatever happens to the delivery.

use std::{
    future::{Future, poll_fn},
    pin::{Pin, pin},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::Poll,
    time::Duration,
};

use http::Response;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tracing::Instrument;

use crate::{
    Outcome, SanghoEvent,
    error_chain::ErrorChain,
    event::{DeliveryClaim, SharedText},
    layer::Config,
    store::{Claim, ClaimToken, StoreError},
};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// After the store refused a renewal, the next one is tried this soon (or at the next period,
/// if that comes first): when the store comes back, the claim is recorded again at once.
const RENEWAL_RETRY: Duration = Duration::from_secs(1);

/// One delivery's claim on one event: the event, the token the layer drew for it, and the
/// settings. Cheap to clone into a background task.
#[derive(Clone)]
struct ClaimOf {
    config: Arc<Config>,
    event_id: SharedText,
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
enum Completion {
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
            let (claim, unanswered) = (self.claim.clone(), unanswered.expect("just inserted"));
            let tasks = &self.claim.config.tasks;
            tasks.spawn(
                async move { claim.release_when_answered(unanswered).await }.in_current_span(),
            );
            return Err(StoreError::Timeout(limit));
        };
        self.on_drop = match answer {
            Ok(Claim::Acquired) | Err(_) => OnDrop::Release,
            Ok(_) => OnDrop::Nothing,
        };
        answer
    }

    /// Runs the handler in a task of its own and settles the claim with its answer.
    ///
    /// The handler and the settlement run to their end whether or not this future is polled
    /// to its own: when the provider hangs up, the handler keeps running, its claim renewed,
    /// and its answer completes or releases the event as usual. The claim is renewed from
    /// another task than the handler's, so a handler that blocks its thread (on a
    /// multi-threaded runtime) is still renewed.
    pub(crate) async fn process<F, B, E>(self, handler: F) -> Processed<B, E>
    where
        F: Future<Output = Result<Response<B>, E>> + Send + 'static,
        B: Send + 'static,
        E: Send + 'static,
    {
        let tasks = self.claim.config.tasks.clone();
        let hang_up = HangUp(Some(self.claim.event_id.clone()));
        let supervisor = tasks.spawn(self.supervise(handler).in_current_span());
        // An error means the runtime is shutting down: the guard, dropped with the task,
        // released the claim.
        let processed = supervisor.await.unwrap_or(Processed::Panicked);
        hang_up.answered();
        processed
    }

    /// The handler's run, from another task than the handler's: renewals, then settlement.
    async fn supervise<F, B, E>(mut self, handler: F) -> Processed<B, E>
    where
        F: Future<Output = Result<Response<B>, E>> + Send + 'static,
        B: Send + 'static,
        E: Send + 'static,
    {
        let config = self.claim.config.clone();
        let event_id = self.claim.event_id.clone();
        let handler = config.tasks.spawn(handler.in_current_span());
        let output = renewing(&self.claim, config.max_processing_time, handler).await;
        match output {
            Ok(Ok(response)) if response.status().is_success() => {
                let outcome = match self.complete().await {
                    Completion::Completed => {
                        tracing::debug!(%event_id, "processed and recorded as completed");
                        Outcome::Processed
                    }
                    Completion::Retrying => Outcome::CompletionFailed,
                    Completion::TakenOver => Outcome::TakenOver,
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
            Err(error) => {
                tracing::error!(
                    %event_id,
                    error = %error,
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
    async fn complete(&mut self) -> Completion {
        self.on_drop = OnDrop::Complete;
        let completion = match self.claim.complete().await {
            Ok(true) => Completion::Completed,
            Ok(false) => {
                self.claim.taken_over("complete");
                Completion::TakenOver
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
                Completion::Retrying
            }
        };
        self.on_drop = OnDrop::Nothing;
        completion
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
        let claim = self.claim.clone();
        let settle = async move {
            if let Some(unanswered) = unanswered {
                return claim.release_when_answered(unanswered).await;
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

/// Logs, when dropped before [`answered`](Self::answered), that the provider went away
/// while its delivery's handler ran.
struct HangUp(Option<SharedText>);

impl HangUp {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for HangUp {
    fn drop(&mut self) {
        if let Some(event_id) = self.0.take() {
            tracing::warn!(
                %event_id,
                outcome = "hung_up",
                "the provider went away before the answer; the handler keeps running, and its \
                 answer completes or releases the event"
            );
        }
    }
}

impl ClaimOf {
    async fn claim(&self) -> Result<Claim, StoreError> {
        let config = &self.config;
        let claim = config.store.claim(
            self.event_id.as_str(),
            self.event_type.as_str(),
            &self.token,
            config.lease,
        );
        claim.await
    }

    async fn complete(&self) -> Result<bool, StoreError> {
        let store = &self.config.store;
        let complete = store.complete(
            self.event_id.as_str(),
            self.event_type.as_str(),
            &self.token,
            self.config.retention,
        );
        timed(self.config.store_timeout, complete).await
    }

    async fn release(&self) {
        let release = self
            .config
            .store
            .release(self.event_id.as_str(), &self.token);
        match timed(self.config.store_timeout, release).await {
            Ok(_) => {}
            Err(error) => tracing::warn!(
                event_id = %self.event_id,
                error = %ErrorChain(&error),
                "could not release the claim; the next delivery waits for its lease to expire"
            ),
        }
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

    async fn renew(&self, limit: Duration) -> Result<bool, StoreError> {
        let store = &self.config.store;
        let renew = store.renew(
            self.event_id.as_str(),
            self.event_type.as_str(),
            &self.token,
            self.config.lease,
        );
        timed(limit, renew).await
    }

    /// Whether the handler's own transaction holds the completion (and its row's lock).
    fn completion_held(&self) -> bool {
        self.delivery
            .as_ref()
            .is_some_and(DeliveryClaim::completion_held)
    }

    fn taken_over(&self, operation: &str) {
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
                    Ok(true) => {
                        tracing::info!(event_id = %self.event_id, "the event is recorded as completed after a retry");
                        return;
                    }
                    Ok(false) => return self.taken_over("complete"),
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
        renewing(&self, limit, retries).await;
    }
}

/// Runs `work`, renewing `claim` every third of the lease for at most `limit`. A renewal
/// already sent when `work` ends is awaited before this returns, so that the settlement that
/// follows (a release) never runs before it.
async fn renewing<F: Future>(claim: &ClaimOf, limit: Duration, work: F) -> F::Output {
    let mut work = pin!(work);
    // Work that is ready at its first poll never starts the renewals.
    if let Poll::Ready(output) = poll_once(work.as_mut()).await {
        return output;
    }
    let (renewal_sent, finished) = (AtomicBool::new(false), AtomicBool::new(false));
    let mut renewals = pin!(renew_periodically(claim, limit, &renewal_sent, &finished));
    let mut renewing = true;
    let output = poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        if renewing && renewals.as_mut().poll(cx).is_ready() {
            renewing = false;
        }
        Poll::Pending
    })
    .await;
    if renewing && renewal_sent.load(Ordering::Acquire) {
        // No renewal is sent after this one: it returns once it is answered.
        finished.store(true, Ordering::Release);
        renewals.await;
    }
    output
}

/// Renews `claim` every third of the lease, counted from when each renewal was sent, for
/// `limit`; stops early when the claim was taken over. Each renewal may take what remains of
/// the lease (the store timeout at most): one that cannot land before the lease ends is of no
/// use. After a failure, the next renewal comes at once (a timeout) or within a second (an
/// error), so that the claim is recorded again as soon as the store is back. `sent` is set
/// while a renewal waits for its answer; once `finished` is set, it returns after the renewal
/// under way instead of sending another.
async fn renew_periodically(
    claim: &ClaimOf,
    limit: Duration,
    sent: &AtomicBool,
    finished: &AtomicBool,
) {
    let config = &claim.config;
    let period = config.lease / 3;
    let start = Instant::now();
    let stop = later(start, limit);
    let mut lease_ends = later(start, config.lease);
    let mut next = later(start, period);
    let mut failures = 0_u32;
    loop {
        if next >= stop {
            sleep_until(stop).await;
            tracing::error!(
                event_id = %claim.event_id,
                max_processing_time = ?limit,
                "still processing after the maximum processing time: no longer renewing the \
                 claim, so a redelivery after the lease may process the event again"
            );
            return;
        }
        sleep_until(next).await;
        let now = Instant::now();
        if claim.completion_held() {
            // The handler's transaction holds the completion (and its row's lock): a renewal
            // would wait on it. Renewals resume if that transaction does not commit.
            next = later(now, period);
            continue;
        }
        let remaining = lease_ends.saturating_duration_since(now);
        let deadline = match remaining.is_zero() {
            true => config.store_timeout,
            false => remaining.min(config.store_timeout),
        };
        sent.store(true, Ordering::Release);
        let renewed = claim.renew(deadline).await;
        sent.store(false, Ordering::Release);
        if finished.load(Ordering::Acquire) {
            return;
        }
        match renewed {
            Ok(true) => {
                if failures > 0 {
                    tracing::warn!(
                        event_id = %claim.event_id,
                        failures,
                        "the claim is renewed again after failed renewals"
                    );
                }
                tracing::trace!(event_id = %claim.event_id, "claim renewed");
                failures = 0;
                lease_ends = later(now, config.lease);
                next = later(now, period);
            }
            Ok(false) => return claim.taken_over("renew"),
            Err(error) => {
                failures += 1;
                tracing::error!(
                    event_id = %claim.event_id,
                    error = %ErrorChain(&error),
                    lease_remaining = ?lease_ends.saturating_duration_since(Instant::now()),
                    "could not renew the claim; retrying"
                );
                // A renewal that ran out of time is sent again at once (it already waited);
                // one the store refused, within a second.
                next = match error {
                    StoreError::Timeout(_) => Instant::now(),
                    _ => later(Instant::now(), period.min(RENEWAL_RETRY)),
                };
            }
        }
    }
}

/// `start + duration`, or a time too far to matter when that overflows.
fn later(start: Instant, duration: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);
    start
        .checked_add(duration)
        .unwrap_or_else(|| start + FAR.min(duration))
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
