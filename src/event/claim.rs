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
    /// layer stops renewing the claim. Call it once the completion is written in the
    /// transaction, just before committing; stores with a `complete_in` do.
    pub fn hold_completion(&self) {
        self.completion_held.store(true, Ordering::Release);
    }

    /// Whether [`hold_completion`](Self::hold_completion) was called.
    pub fn completion_held(&self) -> bool {
        self.completion_held.load(Ordering::Acquire)
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
