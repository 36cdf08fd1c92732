//! The layer's renewer: one background task per layer that renews the claims of the handlers
//! running, every third of the lease, whatever the handlers' own tasks do.
//!
//! A handler runs in its delivery's own future; its claim is registered here before the
//! handler is first polled, and withdrawn when it answers. The renewer ticks while claims are
//! registered, and sends each due renewal in a task of its own. So a handler that blocks its
//! thread (on a multi-threaded runtime) is still renewed, and a handler that answers within
//! the first third of its lease costs one registration and no renewal.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    sync::Notify,
    task::JoinHandle,
    time::{Instant, sleep},
};

use crate::{
    error_chain::ErrorChain,
    guard::ClaimOf,
    store::{Renewal, StoreError},
};

/// How often the renewer looks for due renewals.
const TICK: Duration = Duration::from_millis(50);
/// How long the renewer keeps ticking with nothing registered before it sleeps until the next
/// registration.
const IDLE: Duration = Duration::from_secs(10);
/// After the store refused a renewal, the next one is tried this soon (or at the next period,
/// if that comes first): when the store comes back, the claim is recorded again at once.
const RENEWAL_RETRY: Duration = Duration::from_secs(1);

/// The claims being renewed, shared by a layer's clones.
#[derive(Clone, Default)]
pub(crate) struct Renewer {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    entries: Mutex<Registry>,
    next_id: AtomicU64,
    /// Set while the renewer sleeps until the next registration.
    parked: AtomicBool,
    wake: Notify,
}

/// The claims registered, and the renewer's task, started by the first registration (again
/// when the runtime it ran on has gone).
#[derive(Default)]
struct Registry {
    entries: HashMap<u64, Entry>,
    renewer: Option<JoinHandle<()>>,
}

/// One claim's renewals.
struct Entry {
    claim: ClaimOf,
    /// When the next renewal is due.
    next: Instant,
    /// When the lease last granted ends.
    lease_ends: Instant,
    /// The maximum processing time: no renewal after it.
    stop: Instant,
    failures: u32,
    /// Set while a renewal waits for its answer; notified when it comes.
    sent: Option<Arc<Notify>>,
    /// The claim was withdrawn while a renewal was on its way: removed once it is answered.
    withdrawn: bool,
}

/// A claim registered with the renewer; [`withdraw`](Self::withdraw) it before settling the
/// claim. Dropped without it, the claim is withdrawn at once.
pub(crate) struct Renewals {
    shared: Arc<Shared>,
    id: Option<u64>,
}

impl Renewer {
    /// Renews `claim` every third of the lease from now, for at most `limit`. Answers too
    /// whether it started the renewer's task: the caller then yields once, so that the new
    /// task runs before the caller's thread may be blocked by a handler (a task spawned from
    /// a worker waits in a slot of that worker's that other workers cannot take over).
    pub(crate) fn register(&self, claim: ClaimOf, limit: Duration) -> (Renewals, bool) {
        let shared = &self.shared;
        let lease = claim.config.lease;
        let now = Instant::now();
        let entry = Entry {
            next: later(now, lease / 3),
            lease_ends: later(now, lease),
            stop: later(now, limit),
            failures: 0,
            sent: None,
            withdrawn: false,
            claim,
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut registry = shared.entries.lock().expect("renewals");
        registry.entries.insert(id, entry);
        let start = registry
            .renewer
            .as_ref()
            .is_none_or(JoinHandle::is_finished);
        if start {
            registry.renewer = Some(tokio::spawn(run(Arc::downgrade(shared))));
        }
        drop(registry);
        if shared.parked.swap(false, Ordering::AcqRel) {
            shared.wake.notify_one();
        }
        let renewals = Renewals {
            shared: shared.clone(),
            id: Some(id),
        };
        (renewals, start)
    }
}

impl Renewals {
    /// Stops the renewals. A renewal already sent is awaited first, so that the settlement that
    /// follows (a release) never runs before it lands.
    pub(crate) async fn withdraw(mut self) {
        let Some(id) = self.id.take() else { return };
        let sent = {
            let entries = &mut self.shared.entries.lock().expect("renewals").entries;
            match entries.get_mut(&id) {
                Some(entry) if entry.sent.is_some() => {
                    entry.withdrawn = true;
                    entry.sent.clone()
                }
                _ => {
                    entries.remove(&id);
                    None
                }
            }
        };
        if let Some(sent) = sent {
            sent.notified().await;
        }
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let entries = &mut self.shared.entries.lock().expect("renewals").entries;
            match entries.get_mut(&id) {
                Some(entry) if entry.sent.is_some() => entry.withdrawn = true,
                _ => {
                    entries.remove(&id);
                }
            }
        }
    }
}

/// The renewer's loop: every tick, sends the renewals that are due; sleeps when nothing was
/// registered for a while; ends with its layer.
async fn run(shared: Weak<Shared>) {
    let mut idle_since = Instant::now();
    loop {
        sleep(TICK).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let now = Instant::now();
        let empty = {
            let entries = &mut shared.entries.lock().expect("renewals").entries;
            entries.retain(|id, entry| due(&shared, *id, entry, now));
            entries.is_empty()
        };
        if !empty {
            idle_since = now;
        } else if now.duration_since(idle_since) >= IDLE {
            shared.parked.store(true, Ordering::Release);
            if shared.entries.lock().expect("renewals").entries.is_empty() {
                // Parked, it keeps its layer's state alive: one sleeping task per layer.
                shared.wake.notified().await;
            }
            idle_since = Instant::now();
        }
    }
}

/// Sends `entry`'s renewal if it is due; whether to keep the entry.
fn due(shared: &Arc<Shared>, id: u64, entry: &mut Entry, now: Instant) -> bool {
    if entry.sent.is_some() || entry.next > now {
        return true;
    }
    let claim = &entry.claim;
    if now >= entry.stop {
        tracing::error!(
            event_id = %claim.event_id,
            max_processing_time = ?claim.config.max_processing_time,
            "still processing after the maximum processing time: no longer renewing the \
             claim, so a redelivery after the lease may process the event again"
        );
        return false;
    }
    if claim.completion_held() {
        // The handler's transaction holds the completion (and its row's lock): a renewal
        // would wait on it. Renewals resume if that transaction does not commit.
        entry.next = later(now, claim.config.lease / 3);
        return true;
    }
    // A renewal that cannot land before the lease ends is of no use: it gets what remains.
    let remaining = entry.lease_ends.saturating_duration_since(now);
    let deadline = match remaining.is_zero() {
        true => claim.config.store_timeout,
        false => remaining.min(claim.config.store_timeout),
    };
    let sent = Arc::new(Notify::new());
    entry.sent = Some(sent.clone());
    let (shared, claim) = (shared.clone(), claim.clone());
    tokio::spawn(async move {
        let renewed = claim.renew(deadline).await;
        answered(&shared, id, now, renewed);
        sent.notify_one();
    });
    true
}

/// Records the answer of the renewal `id` sent at `sent_at`.
fn answered(shared: &Shared, id: u64, sent_at: Instant, renewed: Result<Renewal, StoreError>) {
    let entries = &mut shared.entries.lock().expect("renewals").entries;
    let Some(entry) = entries.get_mut(&id) else {
        return;
    };
    entry.sent = None;
    let claim = &entry.claim;
    let period = claim.config.lease / 3;
    let keep = match renewed {
        Ok(Renewal::Held) => {
            if entry.failures > 0 {
                tracing::warn!(
                    event_id = %claim.event_id,
                    failures = entry.failures,
                    "the claim is renewed again after failed renewals"
                );
            }
            tracing::trace!(event_id = %claim.event_id, "claim renewed");
            entry.failures = 0;
            entry.lease_ends = later(sent_at, claim.config.lease);
            entry.next = later(sent_at, period);
            true
        }
        Ok(_) => {
            claim.taken_over("renew");
            false
        }
        Err(error) => {
            entry.failures += 1;
            let now = Instant::now();
            tracing::error!(
                event_id = %claim.event_id,
                error = %ErrorChain(&error),
                lease_remaining = ?entry.lease_ends.saturating_duration_since(now),
                "could not renew the claim; retrying"
            );
            // A renewal that ran out of time is sent again at once (it already waited); one
            // the store refused, within a second.
            entry.next = match error {
                StoreError::Timeout(_) => now,
                _ => later(now, period.min(RENEWAL_RETRY)),
            };
            true
        }
    };
    if !keep || entry.withdrawn {
        entries.remove(&id);
    }
}

/// `start + duration`, or a time too far to matter when that overflows.
pub(crate) fn later(start: Instant, duration: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);
    start.checked_add(duration).unwrap_or(start + FAR)
}
