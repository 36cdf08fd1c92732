//! The purge: deleting old completions and abandoned claims, once or on an interval.

use std::{future::Future, time::Duration};

use tokio::{sync::oneshot, task::JoinHandle, time::MissedTickBehavior};

use crate::Error;

/// A store that can delete its old rows: implemented by every store of this crate, used by
/// [`PurgeTask`].
pub trait Purge: Clone + Send + Sync + 'static {
    /// Deletes the rows past their own expiry (and rows without one older than `retention`);
    /// answers how many rows were deleted.
    fn purge(&self, retention: Duration) -> impl Future<Output = Result<u64, Error>> + Send;
}

/// A background task that runs a store's purge now and then every period, until it is stopped
/// (in the spirit of tower-sessions' `continuously_delete_expired`).
///
/// A failed purge is logged (`tracing`, at `warn`) and retried at the next period; the task
/// never ends by itself. [`stop`](Self::stop) ends it promptly, even in the middle of a purge
/// that waits for a lock: the batches already deleted stay deleted, the one under way is
/// rolled back. Dropping the handle stops the task the same way, without waiting for
/// it; [`abort`](Self::abort) cancels it at once.
///
/// ```
/// use std::time::Duration;
/// use sangho_webhook_sqlx::{PurgeTask, SqliteStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = format!("sqlite://{}", dir.path().join("webhooks.db").display());
/// let store = SqliteStore::connect(&url).await?;
/// store.migrate().await?;
/// let purge = PurgeTask::spawn(store, Duration::from_secs(72 * 3600), Duration::from_secs(3600));
/// // … serve …
/// purge.stop().await;
/// # Ok(()) }
/// ```
///
/// Without the task, the same can run from cron as plain SQL:
/// [`SqlStore::cron_purge_sql`](crate::SqlStore::cron_purge_sql).
#[derive(Debug)]
pub struct PurgeTask {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl PurgeTask {
    /// Spawns the task on the current Tokio runtime: `store.purge(retention)` right away, then
    /// every `period` (a zero period counts as one millisecond).
    ///
    /// # Panics
    ///
    /// If called outside a Tokio runtime.
    pub fn spawn<S: Purge>(store: S, retention: Duration, period: Duration) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    // A stop signal, or the handle was dropped.
                    _ = &mut stopped => break,
                    _ = ticks.tick() => {}
                }
                // A stop cuts a purge short, even one waiting for a lock: the batches before
                // stay deleted, the one under way is rolled back.
                let purged = tokio::select! {
                    biased;
                    _ = &mut stopped => break,
                    purged = store.purge(retention) => purged,
                };
                match purged {
                    Ok(deleted) => tracing::debug!(deleted, "purged the idempotency table"),
                    Err(error) => {
                        tracing::warn!(
                            error = &error as &dyn std::error::Error,
                            "purging the idempotency table failed"
                        );
                    }
                }
            }
        });
        Self {
            stop: Some(stop),
            task,
        }
    }

    /// Stops the task and waits for it to end (a purge under way is cut short).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            // The task may be gone already (runtime shutting down): nothing to signal then.
            let _ = stop.send(());
        }
        let task = &mut self.task;
        if let Err(error) = task.await
            && error.is_panic()
        {
            tracing::error!("the purge task panicked");
        }
    }

    /// Cancels the task at once, even in the middle of a purge (the database rolls the
    /// statement back).
    pub fn abort(self) {
        self.task.abort();
    }

    /// Whether the task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}
