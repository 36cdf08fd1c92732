//! [`SanghoWebhookLayer::drain`]: waiting, at shutdown, for the handlers still running and the
//! settlements still owed.

use std::time::Duration;

use crate::SanghoWebhookLayer;

/// What [`SanghoWebhookLayer::drain`] found when it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Drained {
    abandoned: usize,
}

impl Drained {
    /// How many handlers or settlements were still running at the deadline. Each is cut off
    /// when the runtime stops: its claim expires with its lease, and the provider's next
    /// delivery after that processes the event (again, if its handler had already done its
    /// work).
    pub fn abandoned(&self) -> usize {
        self.abandoned
    }

    /// Whether everything finished before the deadline.
    pub fn is_complete(&self) -> bool {
        self.abandoned == 0
    }
}

impl SanghoWebhookLayer {
    /// Waits up to `deadline` for the handlers this layer (and its clones) still run and for
    /// its background settlements (completion retries, releases), then says what it had to
    /// abandon, logged at `error` too.
    ///
    /// A handler runs to its end even when the provider hangs up, and a completion that failed
    /// is retried in the background: a server that exits as soon as it stops accepting cuts
    /// them off, and their events are processed again after a restart. Call it once the
    /// server has stopped accepting and its connections are closed (axum's
    /// `with_graceful_shutdown`, hyper-util's `GracefulShutdown`), before the runtime ends.
    ///
    /// ```
    /// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let webhooks = SanghoWebhookLayer::new(Secret::new("whsec_x").unwrap(), MokaStore::new());
    /// // ... serve with `webhooks.clone()` on the webhook route until a shutdown signal ...
    /// let drained = webhooks.drain(Duration::from_secs(30)).await;
    /// assert!(drained.is_complete());
    /// # }
    /// ```
    pub async fn drain(&self, deadline: Duration) -> Drained {
        let tasks = &self.config.tasks;
        tasks.close();
        let finished = tokio::time::timeout(deadline, tasks.wait()).await.is_ok();
        let drained = Drained {
            abandoned: if finished { 0 } else { tasks.len() },
        };
        if drained.is_complete() {
            tracing::info!("every webhook handler and settlement finished");
        } else {
            tracing::error!(
                abandoned = drained.abandoned,
                ?deadline,
                "webhook handlers or settlements still running at the drain's deadline: their \
                 events are processed again after their leases"
            );
        }
        tasks.reopen();
        drained
    }
}
