//! Inbox mode: each verified event is stored durably and acknowledged at once, then processed
//! by workers that retry it, dead-letter it and let an operator replay it.
//!
//! In the direct mode ([`SanghoWebhookLayer`](crate::SanghoWebhookLayer)) the handler runs
//! inside the provider's request, so until the handler succeeds the provider is the only
//! place the event lives: a handler that fails for longer than the provider's 48 hours of
//! redeliveries loses the events of that window. In inbox mode the event's row is the job:
//!
//! - **Receipt** ([`InboxReceiver`]): the same verification as the direct mode, every refusal
//!   before any write; then the event (its id, type, raw signed body, the stored headers, the
//!   path and the time) is inserted if its id is new, and answered `202` only once the row is
//!   durable. There is no second write between "stored" and "queued": a crash after the insert
//!   leaves a row that a worker will take.
//! - **Processing** ([`InboxWorker`]): workers take due events under a lease with a fresh
//!   token, renew it while the handler runs, and call the same handler as the direct mode, with
//!   the [`SanghoEvent`](crate::SanghoEvent) in the request's extensions. A 2xx completes the
//!   event; anything else, a panic or a lost lease is a failed attempt, and the event is due
//!   again after a capped exponential backoff with jitter ([`RetryPolicy`]). Out of attempts
//!   (or too old), the event is **dead**: kept, never purged, never retried by itself.
//! - **Operations** ([`Inbox::stats`], [`list`](Inbox::list), [`show`](Inbox::show),
//!   [`replay`](Inbox::replay), [`discard`](Inbox::discard), and the `sangho inbox` command):
//!   what an operator needs to see a backlog and to replay dead events once the cause is
//!   fixed.
//!
//! | the receipt's answer | status | body | [`Outcome`](crate::Outcome) |
//! | --- | --- | --- | --- |
//! | a new event, stored durably | 202 | `{"received":true}` | [`Stored`](crate::Outcome::Stored) |
//! | a duplicate (received, in flight, completed or dead) | 200 | `{"received":true,"duplicate":true}` | [`Duplicate`](crate::Outcome::Duplicate) |
//! | a live claim of a direct-mode delivery (a rolling deploy) | 409, `Retry-After` | `{"error":"in_flight"}` | [`Refused`](crate::Outcome::Refused) |
//! | the store failed or timed out: nothing acknowledged | 503, `Retry-After` | `{"error":"store_unavailable"}` | [`Refused`](crate::Outcome::Refused) |
//! | a refusal of the verify stage | as in the direct mode | `{"error":"<code>"}` | [`Refused`](crate::Outcome::Refused) |
//!
//! # Which mode
//!
//! Choose the direct mode when the handler is fast and its dependencies are as available as
//! the receiver: the provider's redeliveries are then the queue, and nothing else runs.
//! Choose inbox mode when a handler is slow, or when it (or what it calls) may fail for longer
//! than the provider keeps redelivering: the inbox keeps the event for as long as it takes.
//!
//! # What the inbox trusts
//!
//! A worker trusts the stored row: it does not verify the signature again (the event was
//! verified at receipt, and a secret rotated out since must not strand the events it signed).
//! So write access to the inbox's table is the power to inject events: grant it to the
//! receiver, the workers and the operators only. The table holds the provider's events,
//! personal data included, in clear: whoever can read it can read them.
//!
//! # Per-object ordering
//!
//! Sangho, like most payment providers, does not deliver events in the order they happened:
//! `invoice.paid` can arrive before `invoice.created`, and two events of one invoice can arrive
//! a millisecond apart. Two workers that handle them at once race each other in your database.
//! An **ordering key** (opt-in, given per event by the receiver's
//! [`with_ordering_key`](InboxReceiverBuilder::with_ordering_key); [`object_id`] reads
//! `data.object.id`) serializes the events that share it:
//!
//! - two events with one key are never processed at the same time, by any worker of any
//!   process, as long as each handler holds its lease (a handler that outlives its lease is
//!   taken over, as any lost lease is);
//! - they are taken in the order the database recorded their receipts (its own sequence,
//!   never an application's clock);
//! - an earlier event of the key that waits for a retry **blocks the key** until it completes
//!   or goes dead: the order is kept, at the price of waiting for the retry;
//! - a **dead event frees its key**: the events after it go on. A replay counts as a new
//!   receipt for the order: the replayed event runs after the events of its key that are
//!   unfinished when it is replayed;
//! - events with different keys, or none, run in parallel as before.
//!
//! Receipt order is the order in which the provider's deliveries reached the database, not the
//! order in which the events happened: the provider may deliver a later event first, and a
//! failed delivery is redelivered later still. A handler whose effect depends on the object's
//! latest state should still fetch the object from the provider (or compare the event's
//! `created` and the object's version) rather than trust the order of events: the ordering key
//! removes the race between two handlers, not the provider's reordering.
//!
//! # Fresh events first
//!
//! By default ([`TakeOrder::FreshFirst`]) a take hands out events on their first attempt
//! before retries, so that a backlog of failing events never delays a new payment by more
//! than one handler run (an event whose key waits for an earlier event waits all the same).
//! [`InboxWorkerBuilder::with_take_order`] chooses strict receipt order instead.
//!
//! # Durability
//!
//! A receipt is acknowledged only once its row is committed durably: the inbox refuses
//! stores with asynchronous commits ([`InboxReceiverBuilder::build`]). An acknowledged
//! receipt survives a database failover only with synchronous replication; otherwise the last
//! receipts before a failover can be lost after the provider was told they arrived.

mod answer;
mod event;
#[cfg(feature = "test-util")]
mod memory;
mod metrics;
mod ordering;
mod receiver;
mod retry;
mod worker;

pub use answer::{Discarded, FailedAttempt, Failure, NextAttempt, Receipt, Replay, Replayed};
pub use event::{
    EventRecord, EventState, EventSummary, Filter, InboxGauges, InboxStats, ReceivedEvent,
    TakenEvent, UnknownState, rfc3339,
};
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use memory::MemoryInbox;
pub use metrics::{AttemptOutcome, CachedGauges, WorkerMetrics};
pub use ordering::{MAX_ORDERING_KEY_LEN, TakeOrder, object_id, stored_ordering_key};
pub use receiver::{InboxReceiver, InboxReceiverBuilder, ReceiptFuture, STORED_HEADERS};
pub use retry::RetryPolicy;
pub use worker::{InboxDelivery, InboxWorker, InboxWorkerBuilder, WorkerHandle};

use std::{sync::Arc, time::Duration};

use crate::store::{ClaimToken, Claimant, Completion, Release, Renewal, StoreError, async_trait};

/// Where inbox mode keeps its events: the receipt, the workers' leases, and the operations.
///
/// # The rules
///
/// An event is *waiting* (received) until a worker takes it, *in flight* while a worker's
/// lease on it runs, and then *completed*, waiting again (after a failure, until its next
/// attempt is due) or *dead*. An in-flight event whose lease ran out is due again: another
/// worker takes it over.
///
/// 1. **receive** is atomic and durable: among any number of concurrent receipts of one id, at
///    most one answers [`Receipt::Stored`], and only once the row would survive a crash. Every
///    other receipt of a stored (or completed, or dead) id answers [`Receipt::Duplicate`].
/// 2. **take** takes a due event (waiting and due, or in flight with its lease run out), under
///    `token` for `lease`, and counts an attempt; concurrent takes never take one event twice
///    while its lease runs. A lease that ran out is recorded in the event's history as a lost
///    attempt. An event with an ordering key is due only while no other event of its key is
///    in flight and no unfinished (waiting or in-flight) event of its key was received before
///    it. Among the due events, [`TakeOrder::FreshFirst`] takes those on their first attempt
///    (since their receipt or last replay) first, then the others, each in the order of
///    receipt; [`TakeOrder::Receipt`] takes them in the order of receipt.
/// 3. **renew**, **complete**, **fail** and **abandon** are owner-checked: they change the
///    event only while the token is the last to have taken it (its lease may have run out, if
///    nobody took the event over since). `complete` records the event as completed for the
///    retention (and a repeated completion by the token succeeds); `fail` records the attempt
///    (its time and error in the history) and makes the event due after the given delay, or
///    dead; `abandon` makes it due at once, and the attempt does not count.
/// 4. **replay** makes a waiting or dead event (a completed one only when forced) due now with
///    a fresh attempt budget, keeping its history, and gives it the last place in the order of
///    receipt; an in-flight event is refused. **discard** deletes an event that is not in
///    flight.
/// 5. **purge_completed** deletes completed events after their retention, never a waiting,
///    in-flight or dead one.
///
/// The `testing::inbox_conformance` suite (feature `test-util`) checks every rule against a
/// store, and [`MemoryInbox`] (feature `test-util`) is the reference.
#[async_trait]
pub trait Inbox: Send + Sync + 'static {
    /// Stores a verified event if its id is new, durably before it answers.
    async fn receive(&self, event: &ReceivedEvent<'_>) -> Result<Receipt, StoreError>;

    /// Takes the next due event in `order`, under `token` for `lease`; `None` when nothing is
    /// due.
    async fn take(
        &self,
        token: &ClaimToken,
        lease: Duration,
        order: TakeOrder,
    ) -> Result<Option<TakenEvent>, StoreError>;

    /// Extends the token's lease to `lease` from now.
    async fn renew(&self, claimant: &Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError>;

    /// Records the event as completed by the token, for `retention`.
    async fn complete(
        &self,
        claimant: &Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError>;

    /// Records a failed attempt: the event is due again after the attempt's delay, or dead.
    async fn fail(
        &self,
        claimant: &Claimant<'_>,
        attempt: &FailedAttempt<'_>,
    ) -> Result<Failure, StoreError>;

    /// Gives the event back (the worker is shutting down): due at once, the attempt not
    /// counted.
    async fn abandon(&self, claimant: &Claimant<'_>) -> Result<Release, StoreError>;

    /// Waits until an event may be due (a receipt in this process, or a notification from
    /// another), or `at_most`. The default polls: it sleeps for `at_most`.
    async fn wait_for_events(&self, at_most: Duration) {
        tokio::time::sleep(at_most).await;
    }

    /// Whether an acknowledged receipt is durable: `false` for a store configured with
    /// asynchronous commits, which [`InboxReceiverBuilder::build`] refuses.
    fn receipts_are_durable(&self) -> bool {
        true
    }

    /// Events per state, and the age of the oldest waiting event.
    async fn stats(&self) -> Result<InboxStats, StoreError>;

    /// The numbers an operator alerts on, read from indexes only (a metrics scrape): the
    /// waiting, in-flight and dead events and the age of the oldest waiting one. By default
    /// from [`stats`](Self::stats); the SQL stores read their partial indexes instead of
    /// counting completed events.
    async fn gauges(&self) -> Result<InboxGauges, StoreError> {
        Ok(self.stats().await?.into())
    }

    /// [`stats`](Self::stats) for each event type the inbox holds, types in name order.
    async fn stats_by_type(&self) -> Result<Vec<(String, InboxStats)>, StoreError>;

    /// The events the filter selects in the order of receipt (a replayed event in the place of
    /// its replay), at most its limit.
    async fn list(&self, filter: &Filter) -> Result<Vec<EventSummary>, StoreError>;

    /// How many events the filter selects (its limit aside).
    async fn count(&self, filter: &Filter) -> Result<u64, StoreError>;

    /// One event in full, or `None` when the inbox does not hold it.
    async fn show(&self, event_id: &str) -> Result<Option<EventRecord>, StoreError>;

    /// Makes an event due now with a fresh attempt budget.
    async fn replay(&self, event_id: &str, replay: &Replay) -> Result<Replayed, StoreError>;

    /// Deletes an event that is not in flight.
    async fn discard(&self, event_id: &str) -> Result<Discarded, StoreError>;

    /// Deletes up to `limit` completed events whose retention ran out, and answers how many
    /// it deleted; never a waiting, in-flight or dead event. Call it until it answers less than
    /// `limit` (stores that run a purge task of their own do).
    async fn purge_completed(&self, limit: u32) -> Result<u64, StoreError>;
}

macro_rules! forward_inbox {
    ($($pointer:ty),*) => {$(
        #[async_trait]
        impl<T: Inbox + ?Sized> Inbox for $pointer {
            async fn receive(&self, event: &ReceivedEvent<'_>) -> Result<Receipt, StoreError> {
                (**self).receive(event).await
            }
            async fn take(
                &self,
                token: &ClaimToken,
                lease: Duration,
                order: TakeOrder,
            ) -> Result<Option<TakenEvent>, StoreError> {
                (**self).take(token, lease, order).await
            }
            async fn renew(
                &self,
                claimant: &Claimant<'_>,
                lease: Duration,
            ) -> Result<Renewal, StoreError> {
                (**self).renew(claimant, lease).await
            }
            async fn complete(
                &self,
                claimant: &Claimant<'_>,
                retention: Duration,
            ) -> Result<Completion, StoreError> {
                (**self).complete(claimant, retention).await
            }
            async fn fail(
                &self,
                claimant: &Claimant<'_>,
                attempt: &FailedAttempt<'_>,
            ) -> Result<Failure, StoreError> {
                (**self).fail(claimant, attempt).await
            }
            async fn abandon(&self, claimant: &Claimant<'_>) -> Result<Release, StoreError> {
                (**self).abandon(claimant).await
            }
            async fn wait_for_events(&self, at_most: Duration) {
                (**self).wait_for_events(at_most).await
            }
            fn receipts_are_durable(&self) -> bool {
                (**self).receipts_are_durable()
            }
            async fn stats(&self) -> Result<InboxStats, StoreError> {
                (**self).stats().await
            }
            async fn gauges(&self) -> Result<InboxGauges, StoreError> {
                (**self).gauges().await
            }
            async fn stats_by_type(&self) -> Result<Vec<(String, InboxStats)>, StoreError> {
                (**self).stats_by_type().await
            }
            async fn list(&self, filter: &Filter) -> Result<Vec<EventSummary>, StoreError> {
                (**self).list(filter).await
            }
            async fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
                (**self).count(filter).await
            }
            async fn show(&self, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
                (**self).show(event_id).await
            }
            async fn replay(
                &self,
                event_id: &str,
                replay: &Replay,
            ) -> Result<Replayed, StoreError> {
                (**self).replay(event_id, replay).await
            }
            async fn discard(&self, event_id: &str) -> Result<Discarded, StoreError> {
                (**self).discard(event_id).await
            }
            async fn purge_completed(&self, limit: u32) -> Result<u64, StoreError> {
                (**self).purge_completed(limit).await
            }
        }
    )*};
}

forward_inbox!(Arc<T>, Box<T>);
