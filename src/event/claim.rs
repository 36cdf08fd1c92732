//! [`DeliveryClaim`]: the claim a delivery holds on its event, as the handler sees it.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use crate::store::ClaimToken;

/// The claim this delivery holds on its event: the token the layer drew for it, and a way for
/// a store that joins the handler's own database transaction to record the completion there.
///
/// A SQL store's `complete_in` records the completion inside the handler's transaction, so that
/// the handler's effects and the completion commit together, or not at all. It then calls
/// [`hold_completion`](Self::hold_completion): from then on the layer stops renewing the claim,
/// so a renewal never waits on the row the transaction has locked. The layer still completes
/// the event after a 2xx (a repeated completion by the same token changes nothing).
///
/// ```
/// use sangho_webhook::SanghoEvent;
///
/// # fn handler(event: SanghoEvent) {
/// if let Some(claim) = event.claim() {
///     println!("this delivery's claim: {}", claim.token());
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct DeliveryClaim {
    token: ClaimToken,
    completion_held: Arc<AtomicBool>,
}

impl DeliveryClaim {
    pub(crate) fn new(token: ClaimToken) -> Self {
        Self {
            token,
            completion_held: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The claim's token.
    pub fn token(&self) -> &ClaimToken {
        &self.token
    }

    /// Tells the layer that the handler's transaction now holds the event's completion: the
    /// layer stops renewing the claim while the returned [`CompletionHold`] lives. Call it once
    /// the completion is written in the transaction, just before committing, and call
    /// [`CompletionHold::committed`] once the commit succeeded; stores with a `complete_in` do
    /// both for you. A hold dropped without it (the transaction rolled back, or its commit
    /// failed) gives the claim back to the layer, which renews it again.
    pub fn hold_completion(&self) -> CompletionHold {
        self.completion_held.store(true, Ordering::Release);
        CompletionHold {
            completion_held: Some(self.completion_held.clone()),
        }
    }

    /// Whether a [`CompletionHold`] is held: the handler's transaction holds the completion.
    pub fn completion_held(&self) -> bool {
        self.completion_held.load(Ordering::Acquire)
    }
}

/// The handler's transaction holds the event's completion; from
/// [`DeliveryClaim::hold_completion`].
///
/// While it lives, the layer does not renew the claim (a renewal would wait on the row the
/// transaction has locked). [`committed`](Self::committed) keeps it for good; dropped without
/// it, the claim is renewed again, so a handler whose transaction failed can retry it under a
/// live claim.
///
/// ```
/// # fn handler(event: sangho_webhook::SanghoEvent) {
/// if let Some(claim) = event.claim() {
///     let hold = claim.hold_completion();
///     // ... commit the transaction that recorded the completion ...
///     hold.committed();
/// }
/// # }
/// ```
#[must_use = "dropping the hold at once gives the claim back to the layer's renewals"]
#[derive(Debug)]
pub struct CompletionHold {
    completion_held: Option<Arc<AtomicBool>>,
}

impl CompletionHold {
    /// The transaction committed: the completion is recorded, and the claim stays unrenewed
    /// until the layer completes the event after the handler's answer.
    pub fn committed(mut self) {
        self.completion_held = None;
    }
}

impl Drop for CompletionHold {
    fn drop(&mut self) {
        if let Some(completion_held) = self.completion_held.take() {
            completion_held.store(false, Ordering::Release);
        }
    }
}

impl fmt::Debug for DeliveryClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryClaim")
            .field("token", &self.token)
            .field("completion_held", &self.completion_held())
            .finish()
    }
}
