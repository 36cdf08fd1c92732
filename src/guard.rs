//! The claim guard: every store call of one delivery, each under the store timeout, the lease
//! renewed while the handler runs, and the claim settled even when the delivery is dropped.

use std::{
    future::{Future, poll_fn},
    pin::{Pin, pin},
    sync::Arc,
    task::Poll,
    time::Duration,
};

use tokio::time::{Instant, sleep, timeout};

use crate::{
    SanghoEvent,
    error_chain::ErrorChain,
    event::{DeliveryClaim, SharedText},
    layer::Config,
    store::{Claim, ClaimToken, StoreError},
};

/// One delivery's claim on one event: the event, the token the layer drew for it, and the
/// settings. Cheap to move into a background task.
#[derive(Clone)]
struct Owned {
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
    /// Release the claim (the handler failed, panicked or was cancelled, or the claim's answer
    /// never came).
    Release,
    /// Complete the event (the handler succeeded; only the completion was interrupted).
    Complete,
}

/// How the completion of a processed event went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Completion {
    /// The event is recorded as completed.
    Completed,
    /// Another delivery holds or completed the event: this one's claim had been taken over.
    TakenOver,
    /// The first attempt failed; the layer keeps retrying in the background.
    Retrying,
}

/// Owns a delivery's claim from before it is made until it is settled.
///
/// Dropped unsettled, it settles in a spawned task: a release, or, when the handler had
/// already succeeded, the completion with its retries.
pub(crate) struct ClaimGuard {
    claim: Owned,
    on_drop: OnDrop,
}

impl ClaimGuard {
    /// A guard for a claim of `event` under a fresh token. From here until the claim's answer is
    /// known, dropping the guard releases the claim (the store may have applied it).
    pub(crate) fn new(config: &Arc<Config>, event: &SanghoEvent) -> Self {
        let (event_id, event_type) = event.shared_id_and_type();
        Self {
            claim: Owned {
                config: config.clone(),
                event_id,
                event_type,
                token: ClaimToken::generate(),
                delivery: None,
            },
            on_drop: OnDrop::Release,
        }
    }

    /// The claim as the handler sees it: its token, and whether a transaction of the
    /// handler's holds the completion (then the claim is no longer renewed).
    pub(crate) fn delivery_claim(&mut self) -> DeliveryClaim {
        self.claim
            .delivery
            .get_or_insert_with(|| DeliveryClaim::new(self.claim.token))
            .clone()
    }

    /// The id of the event claimed.
    pub(crate) fn event_id(&self) -> &SharedText {
        &self.claim.event_id
    }

    /// Claims the event, under the store timeout. Only an acquired claim stays armed; a claim
    /// that failed or timed out is released in the background when the guard is dropped.
    pub(crate) async fn claim(&mut self) -> Result<Claim, StoreError> {
        let claim = &self.claim;
        let store = &claim.config.store;
        let outcome = timed(
            claim.config.store_timeout,
            store.claim(
                claim.event_id.as_str(),
                claim.event_type.as_str(),
                &claim.token,
                claim.config.lease,
            ),
        )
        .await;
        if matches!(outcome, Ok(Claim::Completed | Claim::InFlight)) {
            self.on_drop = OnDrop::Nothing;
        }
        outcome
    }

    /// Runs `work` (the handler) while renewing the claim every third of the lease, until the
    /// maximum processing time. A handler that answers before the first renewal is due costs
    /// one timer at most.
    pub(crate) async fn renewing<F: Future>(&self, work: F) -> F::Output {
        renewing(&self.claim, self.claim.config.max_processing_time, work).await
    }

    /// The handler succeeded: records the event as completed. The first attempt is awaited;
    /// if it fails, the attempts go on in the background (the claim still renewed) for the
    /// configured completion-retry time.
    pub(crate) async fn complete(mut self) -> Completion {
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
                self.on_drop = OnDrop::Nothing;
                tokio::spawn(self.claim.clone().complete_with_retries());
                return Completion::Retrying;
            }
        };
        self.on_drop = OnDrop::Nothing;
        completion
    }

    /// The handler failed: releases the claim, so that the next delivery processes the event.
    pub(crate) async fn release(mut self) {
        self.on_drop = OnDrop::Nothing;
        self.claim.release().await;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let on_drop = std::mem::replace(&mut self.on_drop, OnDrop::Nothing);
        if on_drop == OnDrop::Nothing {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                event_id = %self.claim.event_id,
                "no runtime to settle the claim on; it will expire with its lease"
            );
            return;
        };
        tracing::warn!(
            event_id = %self.claim.event_id,
            outcome = "abandoned",
            settling = ?on_drop,
            "the delivery ended before it was settled (the client went away, or the handler \
             panicked); settling its claim in the background"
        );
        let claim = self.claim.clone();
        runtime.spawn(async move {
            match on_drop {
                OnDrop::Complete => claim.complete_with_retries().await,
                _ => claim.release().await,
            }
        });
    }
}

impl Owned {
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

    async fn renew(&self) -> Result<bool, StoreError> {
        let store = &self.config.store;
        let renew = store.renew(
            self.event_id.as_str(),
            self.event_type.as_str(),
            &self.token,
            self.config.lease,
        );
        timed(self.config.store_timeout, renew).await
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
            let deadline = Instant::now() + limit;
            let mut backoff = Duration::from_millis(100);
            loop {
                match self.complete().await {
                    Ok(true) => {
                        tracing::info!(event_id = %self.event_id, "the event is recorded as completed after a retry");
                        return;
                    }
                    Ok(false) => return self.taken_over("complete"),
                    Err(error) if Instant::now() + backoff >= deadline => {
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

/// Runs `work`, renewing `claim` every third of the lease for at most `limit`.
async fn renewing<F: Future>(claim: &Owned, limit: Duration, work: F) -> F::Output {
    let mut work = pin!(work);
    // The handler is polled first: one that is ready at once never starts the renewals.
    if let Poll::Ready(output) = poll_once(work.as_mut()).await {
        return output;
    }
    let mut renewals = pin!(renew_periodically(claim, limit));
    let mut renewing = true;
    poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        if renewing && renewals.as_mut().poll(cx).is_ready() {
            renewing = false;
        }
        Poll::Pending
    })
    .await
}

/// Renews `claim` every third of the lease, for `limit`; stops early when the claim was taken
/// over. Each failure is logged at `error` with the event id.
async fn renew_periodically(claim: &Owned, limit: Duration) {
    let period = claim.config.lease / 3;
    let deadline = Instant::now() + limit;
    loop {
        let next = Instant::now() + period;
        if next >= deadline {
            tokio::time::sleep_until(deadline).await;
            tracing::error!(
                event_id = %claim.event_id,
                max_processing_time = ?limit,
                "still processing after the maximum processing time: no longer renewing the \
                 claim, so a redelivery after the lease may process the event again"
            );
            return;
        }
        tokio::time::sleep_until(next).await;
        if claim
            .delivery
            .as_ref()
            .is_some_and(DeliveryClaim::completion_held)
        {
            // The handler's transaction holds the completion (and its row's lock): renewing
            // would wait on it. The layer completes after the handler answers.
            return;
        }
        match claim.renew().await {
            Ok(true) => tracing::trace!(event_id = %claim.event_id, "claim renewed"),
            Ok(false) => return claim.taken_over("renew"),
            Err(error) => tracing::error!(
                event_id = %claim.event_id,
                error = %ErrorChain(&error),
                "could not renew the claim; retrying at the next period"
            ),
        }
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
async fn poll_once<F: Future>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}
