//! The inbox conformance suite: the rules every [`Inbox`] must follow, one check per rule, and
//! a model check against [`MemoryInbox`], the reference.
//!
//! Run it with [`inbox_conformance!`](crate::inbox_conformance), which writes one
//! `#[tokio::test]` per check. Unlike the idempotency store's checks, each inbox check needs
//! an inbox of its own, empty (a take hands out any due event): give the macro an expression
//! that makes a fresh one each time, with its cleanup in an [`InboxUnderTest`].
//!
//! ```
//! # mod wrapper {
//! sangho_webhook::inbox_conformance!(async { sangho_webhook::inbox::MemoryInbox::new() });
//! # }
//! ```

use std::{collections::HashSet, sync::Arc, time::Duration};

use bytes::Bytes;

use crate::{
    inbox::{
        Discarded, EventState, FailedAttempt, Failure, Filter, Inbox, MemoryInbox, NextAttempt,
        Receipt, ReceivedEvent, Replay, Replayed, TakeOrder, TakenEvent,
    },
    store::{ClaimToken, Claimant, Completion, Release, Renewal},
    testing::conformance::{LONG, PAST_SHORT, SHORT, unique_event_id},
};

/// How many concurrent receipts of one event [`concurrent_receipts_store_once`] makes.
pub const CONCURRENT_RECEIPTS: usize = 50;
/// The body size of [`a_body_at_the_limit_is_stored_byte_for_byte`]: the receiver's default
/// body limit, 1 MiB.
pub const BODY_LIMIT: usize = crate::SanghoWebhookLayer::DEFAULT_MAX_BODY_SIZE;

const TYPE: &str = crate::testing::fixtures::EVENT_TYPE;
const PATH: &str = "/webhooks/sangho";

/// An inbox for one check, and what cleans it up after the check (a table to drop): see
/// [`StoreUnderTest`](crate::testing::conformance::StoreUnderTest), its counterpart.
pub struct InboxUnderTest {
    inbox: Arc<dyn Inbox>,
    _cleanup: Box<dyn Send>,
}

impl InboxUnderTest {
    /// `inbox`, with nothing to clean up.
    pub fn new(inbox: impl Inbox) -> Self {
        Self {
            inbox: Arc::new(inbox),
            _cleanup: Box::new(()),
        }
    }

    /// Keeps `cleanup` until this value is dropped, after the check.
    pub fn with_cleanup(self, cleanup: impl Send + 'static) -> Self {
        Self {
            inbox: self.inbox,
            _cleanup: Box::new(cleanup),
        }
    }

    /// The inbox, for a check.
    pub fn inbox(&self) -> Arc<dyn Inbox> {
        self.inbox.clone()
    }
}

impl<I: Inbox> From<I> for InboxUnderTest {
    fn from(inbox: I) -> Self {
        Self::new(inbox)
    }
}

impl std::fmt::Debug for InboxUnderTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxUnderTest").finish_non_exhaustive()
    }
}

/// The headers every check stores.
fn headers() -> Vec<(String, String)> {
    vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("sangho-signature".to_owned(), "t=1,v1=00".to_owned()),
    ]
}

fn body_of(id: &str) -> Bytes {
    Bytes::from(format!(r#"{{"id":"{id}","type":"{TYPE}"}}"#))
}

/// Receives `id` with its usual body, and answers what the inbox found.
pub async fn receive(inbox: &dyn Inbox, id: &str) -> Receipt {
    receive_with_key(inbox, id, None).await
}

/// Receives `id` with its usual body and the ordering key `key`, and answers what the inbox
/// found.
pub async fn receive_with_key(inbox: &dyn Inbox, id: &str, key: Option<&str>) -> Receipt {
    let (body, headers) = (body_of(id), headers());
    let event = ReceivedEvent::new(id, TYPE, &body, &headers, PATH).with_ordering_key(key);
    inbox
        .receive(&event)
        .await
        .unwrap_or_else(|error| panic!("receiving {id} failed: {error:?}"))
}

/// Receives a fresh event, and panics unless it is stored; answers its id.
pub async fn stored(inbox: &dyn Inbox, label: &str) -> String {
    let id = unique_event_id(label);
    assert_eq!(receive(inbox, &id).await, Receipt::Stored, "receiving {id}");
    id
}

/// Receives a fresh event with the ordering key `key`, and panics unless it is stored;
/// answers its id.
pub async fn stored_with_key(inbox: &dyn Inbox, label: &str, key: &str) -> String {
    let id = unique_event_id(label);
    let receipt = receive_with_key(inbox, &id, Some(key)).await;
    assert_eq!(receipt, Receipt::Stored, "receiving {id}");
    id
}

/// Takes the next due event for `lease` under a fresh token, new events first.
pub async fn take(inbox: &dyn Inbox, lease: Duration) -> Option<TakenEvent> {
    take_in(inbox, lease, TakeOrder::FreshFirst).await
}

/// Takes the next due event in `order` for `lease` under a fresh token.
pub async fn take_in(inbox: &dyn Inbox, lease: Duration, order: TakeOrder) -> Option<TakenEvent> {
    inbox
        .take(&ClaimToken::generate(), lease, order)
        .await
        .unwrap_or_else(|error| panic!("a take failed: {error:?}"))
}

/// Takes the next due event, and panics unless it is `id`.
pub async fn take_event(inbox: &dyn Inbox, id: &str, lease: Duration) -> TakenEvent {
    let taken = take(inbox, lease).await;
    match taken {
        Some(taken) if taken.event_id == id => taken,
        other => panic!("the take should hand out {id}, got {other:?}"),
    }
}

fn other_token<'a>(taken: &'a TakenEvent, token: &'a ClaimToken) -> Claimant<'a> {
    Claimant::new(&taken.event_id, &taken.event_type, token)
}

async fn complete(inbox: &dyn Inbox, claimant: &Claimant<'_>, retention: Duration) -> Completion {
    inbox
        .complete(claimant, retention)
        .await
        .unwrap_or_else(|error| panic!("a completion failed: {error:?}"))
}

async fn fail(
    inbox: &dyn Inbox,
    claimant: &Claimant<'_>,
    error: &str,
    next: NextAttempt,
) -> Failure {
    inbox
        .fail(claimant, &FailedAttempt::new(error, next))
        .await
        .unwrap_or_else(|store| panic!("recording a failure failed: {store:?}"))
}

async fn state(inbox: &dyn Inbox, id: &str) -> Option<EventState> {
    let record = inbox
        .show(id)
        .await
        .unwrap_or_else(|error| panic!("showing {id} failed: {error:?}"));
    record.map(|record| record.summary.state)
}

async fn replay(inbox: &dyn Inbox, id: &str, replay: &Replay) -> Replayed {
    inbox
        .replay(id, replay)
        .await
        .unwrap_or_else(|error| panic!("replaying {id} failed: {error:?}"))
}

/// A new event is stored once, with its body, headers and path as received; a second receipt
/// is a duplicate.
pub async fn receipt_stores_a_new_event_once(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "receipt").await;
    assert_eq!(receive(&*inbox, &id).await, Receipt::Duplicate);
    let record = inbox
        .show(&id)
        .await
        .expect("show")
        .expect("the stored event");
    assert_eq!(record.summary.state, EventState::Received);
    assert_eq!(record.summary.event_type, TYPE);
    assert_eq!(record.summary.attempts, 0);
    assert_eq!(record.body, body_of(&id));
    assert_eq!(record.headers, headers());
    assert_eq!(record.path, PATH);
}

/// Of [`CONCURRENT_RECEIPTS`] concurrent receipts of one event, exactly one stores it.
pub async fn concurrent_receipts_store_once(inbox: Arc<dyn Inbox>) {
    let id = unique_event_id("receipts");
    let barrier = Arc::new(tokio::sync::Barrier::new(CONCURRENT_RECEIPTS));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENT_RECEIPTS {
        let (inbox, id, barrier) = (inbox.clone(), id.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            receive(&*inbox, &id).await
        });
    }
    let receipts = tasks.join_all().await;
    let stored = receipts.iter().filter(|r| **r == Receipt::Stored).count();
    assert_eq!(stored, 1, "{receipts:?}");
    assert!(
        receipts
            .iter()
            .all(|r| matches!(r, Receipt::Stored | Receipt::Duplicate))
    );
}

/// A receipt of an event already in the inbox is a duplicate whatever its state: waiting, in
/// flight, completed or dead.
pub async fn a_duplicate_is_acknowledged_in_every_state(inbox: Arc<dyn Inbox>) {
    let waiting = stored(&*inbox, "waiting").await;
    assert_eq!(receive(&*inbox, &waiting).await, Receipt::Duplicate);
    let taken = take_event(&*inbox, &waiting, LONG).await;
    assert_eq!(
        receive(&*inbox, &waiting).await,
        Receipt::Duplicate,
        "in flight"
    );
    complete(&*inbox, &taken.claimant(), LONG).await;
    assert_eq!(
        receive(&*inbox, &waiting).await,
        Receipt::Duplicate,
        "completed"
    );

    let dead = stored(&*inbox, "dead").await;
    let taken = take_event(&*inbox, &dead, LONG).await;
    fail(&*inbox, &taken.claimant(), "status 500", NextAttempt::Dead).await;
    assert_eq!(receive(&*inbox, &dead).await, Receipt::Duplicate, "dead");
}

/// Takes hand out due events in the order they were received, each once, then nothing.
pub async fn take_hands_out_events_in_receipt_order(inbox: Arc<dyn Inbox>) {
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(stored(&*inbox, "order").await);
    }
    for id in &ids {
        let taken = take_event(&*inbox, id, LONG).await;
        assert_eq!(taken.attempt, 1);
        assert_eq!(taken.body, body_of(id));
        assert_eq!(taken.headers, headers());
        assert_eq!(taken.path, PATH);
    }
    assert!(take(&*inbox, LONG).await.is_none(), "nothing else is due");
}

/// Eight concurrent workers taking until nothing is due take each of 40 events exactly once.
pub async fn concurrent_takes_never_take_one_event_twice(inbox: Arc<dyn Inbox>) {
    let mut ids = HashSet::new();
    for _ in 0..40 {
        ids.insert(stored(&*inbox, "takes").await);
    }
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let inbox = inbox.clone();
        workers.spawn(async move {
            let mut taken = Vec::new();
            while let Some(event) = take(&*inbox, LONG).await {
                taken.push(event.event_id);
            }
            taken
        });
    }
    let taken: Vec<String> = workers.join_all().await.into_iter().flatten().collect();
    let distinct: HashSet<String> = taken.iter().cloned().collect();
    assert_eq!(taken.len(), ids.len(), "each event taken once");
    assert_eq!(distinct, ids);
}

/// Eight takes at once from a backlog of due events each take one, five times over: a take
/// passes over the events other takes hold, and never comes back empty while an event it could
/// take is due (a take that locked every due event would leave the others empty-handed until
/// the next poll).
pub async fn concurrent_takes_of_a_backlog_each_take_an_event(inbox: Arc<dyn Inbox>) {
    const TAKES: usize = 8;
    for _ in 0..TAKES * 5 {
        stored(&*inbox, "backlog").await;
    }
    let mut taken = HashSet::new();
    for round in 1..=5 {
        let together = Arc::new(tokio::sync::Barrier::new(TAKES));
        let mut takes = tokio::task::JoinSet::new();
        for _ in 0..TAKES {
            let (inbox, together) = (inbox.clone(), together.clone());
            takes.spawn(async move {
                together.wait().await;
                take(&*inbox, LONG).await
            });
        }
        for event in takes.join_all().await {
            let event = event.unwrap_or_else(|| {
                panic!("round {round}: a take came back empty while events were due")
            });
            assert!(taken.insert(event.event_id), "an event taken twice");
        }
    }
}

/// A lease that runs out makes the event due again: another token takes it over as the next
/// attempt, with the lost lease in its history, and the first token changes nothing any more.
pub async fn an_expired_lease_is_taken_over(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "expired").await;
    let first = take_event(&*inbox, &id, SHORT).await;
    assert!(take(&*inbox, LONG).await.is_none(), "leased");
    tokio::time::sleep(PAST_SHORT).await;
    let second = take_event(&*inbox, &id, LONG).await;
    assert_eq!(second.attempt, 2);
    assert_ne!(first.token, second.token);
    let old = first.claimant();
    assert_eq!(
        inbox.renew(&old, LONG).await.expect("renew"),
        Renewal::TakenOver
    );
    assert_eq!(complete(&*inbox, &old, LONG).await, Completion::TakenOver);
    assert_eq!(
        fail(&*inbox, &old, "late", NextAttempt::Dead).await,
        Failure::NotHeld
    );
    assert_eq!(
        inbox.abandon(&old).await.expect("abandon"),
        Release::NotHeld
    );
    let record = inbox.show(&id).await.expect("show").expect("the event");
    assert_eq!(record.summary.state, EventState::InFlight);
    assert!(
        record.history.iter().any(|line| line.contains("lease")),
        "the lost lease is in the history: {:?}",
        record.history
    );
    assert_eq!(
        complete(&*inbox, &second.claimant(), LONG).await,
        Completion::Recorded
    );
}

/// A renewal extends the lease: the event is not taken over after the first lease.
pub async fn renew_extends_the_lease(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "renew").await;
    let taken = take_event(&*inbox, &id, SHORT).await;
    let renewal = inbox.renew(&taken.claimant(), LONG).await.expect("renew");
    assert_eq!(renewal, Renewal::Held);
    let stranger = ClaimToken::generate();
    let by_stranger = inbox.renew(&other_token(&taken, &stranger), LONG).await;
    assert_eq!(by_stranger.expect("renew"), Renewal::TakenOver);
    tokio::time::sleep(PAST_SHORT).await;
    assert!(
        take(&*inbox, LONG).await.is_none(),
        "the renewed lease runs"
    );
}

/// Completion is owner-checked: another token changes nothing; the owner completes (twice
/// too); a completed event is never taken again, and is counted as completed.
pub async fn completion_is_owner_checked(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "complete").await;
    let taken = take_event(&*inbox, &id, LONG).await;
    let stranger = ClaimToken::generate();
    assert_eq!(
        complete(&*inbox, &other_token(&taken, &stranger), LONG).await,
        Completion::TakenOver
    );
    assert_eq!(state(&*inbox, &id).await, Some(EventState::InFlight));
    assert_eq!(
        complete(&*inbox, &taken.claimant(), LONG).await,
        Completion::Recorded
    );
    assert_eq!(
        complete(&*inbox, &taken.claimant(), LONG).await,
        Completion::Recorded
    );
    assert_eq!(state(&*inbox, &id).await, Some(EventState::Completed));
    assert!(take(&*inbox, LONG).await.is_none());
    let stats = inbox.stats().await.expect("stats");
    assert_eq!(
        (stats.completed, stats.received, stats.in_flight),
        (1, 0, 0)
    );
}

/// A failed attempt is recorded (error and history) and the event is due again after its
/// delay, not before, as the next attempt.
pub async fn a_failed_attempt_is_due_after_its_delay(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "backoff").await;
    let taken = take_event(&*inbox, &id, LONG).await;
    let busy = NextAttempt::After(SHORT);
    let recorded = fail(&*inbox, &taken.claimant(), "status 503: busy", busy).await;
    assert_eq!(recorded, Failure::Recorded);
    assert!(
        take(&*inbox, LONG).await.is_none(),
        "not due before the delay"
    );
    let record = inbox.show(&id).await.expect("show").expect("the event");
    assert_eq!(record.summary.state, EventState::Received);
    assert_eq!(record.summary.attempts, 1);
    assert_eq!(
        record.summary.last_error.as_deref(),
        Some("status 503: busy")
    );
    assert!(
        record
            .history
            .iter()
            .any(|line| line.contains("status 503: busy"))
    );
    assert!(record.due_at.is_some());
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(take_event(&*inbox, &id, LONG).await.attempt, 2);
}

/// A dead event is kept and never taken again by itself.
pub async fn a_dead_event_is_kept_and_never_taken(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "dead").await;
    let taken = take_event(&*inbox, &id, SHORT).await;
    let recorded = fail(&*inbox, &taken.claimant(), "status 500", NextAttempt::Dead).await;
    assert_eq!(recorded, Failure::Recorded);
    tokio::time::sleep(PAST_SHORT).await;
    assert!(
        take(&*inbox, LONG).await.is_none(),
        "a dead event is never due"
    );
    assert_eq!(state(&*inbox, &id).await, Some(EventState::Dead));
    assert_eq!(inbox.stats().await.expect("stats").dead, 1);
}

/// A replay makes a dead event due at once with a fresh attempt budget, keeping its history;
/// an in-flight event is refused, a completed one unless forced, an unknown one is unknown.
pub async fn replay_makes_an_event_due_with_a_fresh_budget(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "replay").await;
    let taken = take_event(&*inbox, &id, LONG).await;
    fail(
        &*inbox,
        &taken.claimant(),
        "status 500: bug",
        NextAttempt::Dead,
    )
    .await;
    let fixed = Replay::new().with_reason("the bug is fixed");
    assert_eq!(replay(&*inbox, &id, &fixed).await, Replayed::Replayed);
    let again = take_event(&*inbox, &id, LONG).await;
    assert_eq!(again.attempt, 1, "a fresh budget");
    assert_eq!(
        replay(&*inbox, &id, &Replay::new()).await,
        Replayed::InFlight
    );
    complete(&*inbox, &again.claimant(), LONG).await;
    assert_eq!(
        replay(&*inbox, &id, &Replay::new()).await,
        Replayed::Completed
    );
    assert_eq!(state(&*inbox, &id).await, Some(EventState::Completed));
    let forced = Replay::new()
        .with_force(true)
        .with_reason("processed wrongly");
    assert_eq!(replay(&*inbox, &id, &forced).await, Replayed::Replayed);
    let record = inbox.show(&id).await.expect("show").expect("the event");
    assert_eq!(record.summary.state, EventState::Received);
    assert_eq!(record.replays, 2);
    let history = record.history.join("\n");
    for kept in ["status 500: bug", "the bug is fixed", "processed wrongly"] {
        assert!(history.contains(kept), "{kept:?} in the history: {history}");
    }
    let unknown = unique_event_id("unknown");
    assert_eq!(replay(&*inbox, &unknown, &forced).await, Replayed::Unknown);
}

/// An abandoned event is due again at once, and the attempt does not count; abandon and fail
/// by another token change nothing.
pub async fn abandon_makes_the_event_due_at_once_without_counting(inbox: Arc<dyn Inbox>) {
    let id = stored(&*inbox, "abandon").await;
    let taken = take_event(&*inbox, &id, LONG).await;
    let stranger = ClaimToken::generate();
    let foreign = other_token(&taken, &stranger);
    assert_eq!(
        inbox.abandon(&foreign).await.expect("abandon"),
        Release::NotHeld
    );
    assert_eq!(
        fail(&*inbox, &foreign, "x", NextAttempt::Dead).await,
        Failure::NotHeld
    );
    assert_eq!(
        inbox.abandon(&taken.claimant()).await.expect("abandon"),
        Release::Released
    );
    assert_eq!(take_event(&*inbox, &id, LONG).await.attempt, 1);
}

/// Discard deletes a waiting, completed or dead event, refuses an in-flight one, and knows no
/// unknown one.
pub async fn discard_deletes_all_but_in_flight(inbox: Arc<dyn Inbox>) {
    let waiting = stored(&*inbox, "discard").await;
    assert_eq!(
        inbox.discard(&waiting).await.expect("discard"),
        Discarded::Discarded
    );
    assert_eq!(state(&*inbox, &waiting).await, None);
    let held = stored(&*inbox, "discard").await;
    take_event(&*inbox, &held, LONG).await;
    assert_eq!(
        inbox.discard(&held).await.expect("discard"),
        Discarded::InFlight
    );
    assert_eq!(state(&*inbox, &held).await, Some(EventState::InFlight));
    let unknown = unique_event_id("unknown");
    assert_eq!(
        inbox.discard(&unknown).await.expect("discard"),
        Discarded::Unknown
    );
}

/// The stats count each state, and the oldest waiting event's age is that of the first one
/// received among those due.
pub async fn stats_count_each_state(inbox: Arc<dyn Inbox>) {
    assert_eq!(inbox.stats().await.expect("stats").oldest_waiting, None);
    let first = stored(&*inbox, "stats").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ids = [
        first,
        stored(&*inbox, "stats").await,
        stored(&*inbox, "stats").await,
    ];
    let held = take_event(&*inbox, &ids[0], LONG).await;
    complete(&*inbox, &held.claimant(), LONG).await;
    let held = take_event(&*inbox, &ids[1], LONG).await;
    fail(&*inbox, &held.claimant(), "status 500", NextAttempt::Dead).await;
    take_event(&*inbox, &ids[2], LONG).await;
    let waiting = stored(&*inbox, "stats").await;
    let stats = inbox.stats().await.expect("stats");
    assert_eq!(
        (stats.received, stats.in_flight, stats.completed, stats.dead),
        (1, 1, 1, 1),
        "{stats:?}"
    );
    let oldest = stats.oldest_waiting.expect("one event waits");
    assert!(
        oldest < Duration::from_secs(1),
        "{oldest:?}: {waiting} waits, received just now"
    );
    let gauges = inbox.gauges().await.expect("gauges");
    assert_eq!(
        (gauges.received, gauges.in_flight, gauges.dead),
        (1, 1, 1),
        "{gauges:?}"
    );
    let oldest = gauges.oldest_waiting.expect("one event waits");
    assert!(oldest < Duration::from_secs(1), "{oldest:?}");
}

/// `stats_by_type` counts each state per event type, types in name order.
pub async fn stats_by_type_count_each_state_per_type(inbox: Arc<dyn Inbox>) {
    assert_eq!(inbox.stats_by_type().await.expect("stats by type"), []);
    let (body, headers) = (body_of("x"), headers());
    let mut ids = Vec::new();
    for kind in ["invoice.paid", "charge.failed", "invoice.paid"] {
        let id = unique_event_id("bytype");
        let event = ReceivedEvent::new(&id, kind, &body, &headers, PATH);
        assert_eq!(
            inbox.receive(&event).await.expect("receive"),
            Receipt::Stored
        );
        ids.push(id);
    }
    let held = take_event(&*inbox, &ids[0], LONG).await;
    fail(&*inbox, &held.claimant(), "status 500", NextAttempt::Dead).await;
    let by_type = inbox.stats_by_type().await.expect("stats by type");
    let counts: Vec<(&str, [u64; 4])> = by_type
        .iter()
        .map(|(kind, stats)| {
            let counts = [stats.received, stats.in_flight, stats.completed, stats.dead];
            (kind.as_str(), counts)
        })
        .collect();
    assert_eq!(
        counts,
        [
            ("charge.failed", [1, 0, 0, 0]),
            ("invoice.paid", [1, 0, 0, 1])
        ]
    );
}

/// `list` selects by state, type and receipt time, in receipt order, up to its limit; `count`
/// counts the same selection without the limit.
pub async fn list_and_count_select_by_state_type_and_time(inbox: Arc<dyn Inbox>) {
    let before_all = std::time::SystemTime::now() - Duration::from_secs(1);
    let ids = [
        stored(&*inbox, "list").await,
        stored(&*inbox, "list").await,
        stored(&*inbox, "list").await,
    ];
    let held = take_event(&*inbox, &ids[0], LONG).await;
    fail(&*inbox, &held.claimant(), "status 500", NextAttempt::Dead).await;
    let all = inbox.list(&Filter::new()).await.expect("list");
    let listed: Vec<_> = all.iter().map(|s| s.event_id.clone()).collect();
    assert_eq!(listed, ids, "receipt order");
    let dead = Filter::new().with_state(EventState::Dead);
    let dead_listed = inbox.list(&dead).await.expect("list");
    assert_eq!(dead_listed.len(), 1);
    assert_eq!(dead_listed[0].event_id, ids[0]);
    assert_eq!(dead_listed[0].last_error.as_deref(), Some("status 500"));
    let limited = Filter::new().with_state(EventState::Received).with_limit(1);
    assert_eq!(inbox.list(&limited).await.expect("list").len(), 1);
    assert_eq!(inbox.count(&limited).await.expect("count"), 2);
    let other_type = Filter::new().with_event_type("invoice.paid");
    assert_eq!(inbox.count(&other_type).await.expect("count"), 0);
    assert_eq!(
        inbox
            .count(&Filter::new().with_event_type(TYPE))
            .await
            .expect("count"),
        3
    );
    let later = std::time::SystemTime::now() + Duration::from_secs(60);
    assert_eq!(
        inbox
            .count(&Filter::new().with_since(later))
            .await
            .expect("count"),
        0
    );
    let window = Filter::new().with_since(before_all).with_before(later);
    assert_eq!(inbox.count(&window).await.expect("count"), 3);
    assert_eq!(
        inbox
            .count(&Filter::new().with_before(before_all))
            .await
            .expect("count"),
        0
    );
}

/// The purge deletes completed events past their retention, and never a waiting, in-flight
/// (even with its lease run out) or dead one; a receipt of a purged event stores it anew.
pub async fn the_purge_deletes_only_completed_events_past_their_retention(inbox: Arc<dyn Inbox>) {
    let completed = stored(&*inbox, "purged").await;
    let held = take_event(&*inbox, &completed, LONG).await;
    complete(&*inbox, &held.claimant(), SHORT).await;
    let dead = stored(&*inbox, "kept").await;
    let held = take_event(&*inbox, &dead, LONG).await;
    fail(&*inbox, &held.claimant(), "status 500", NextAttempt::Dead).await;
    let lost = stored(&*inbox, "kept").await;
    take_event(&*inbox, &lost, SHORT).await;
    let retrying = stored(&*inbox, "kept").await;
    let held = take_event(&*inbox, &retrying, LONG).await;
    fail(
        &*inbox,
        &held.claimant(),
        "status 500",
        NextAttempt::After(LONG),
    )
    .await;
    let waiting = stored(&*inbox, "kept").await;
    tokio::time::sleep(PAST_SHORT).await;

    let mut purged = 0;
    loop {
        let batch = inbox.purge_completed(2).await.expect("purge");
        purged += batch;
        if batch < 2 {
            break;
        }
    }
    assert_eq!(purged, 1);
    assert_eq!(state(&*inbox, &completed).await, None);
    for kept in [&dead, &lost, &retrying, &waiting] {
        assert!(state(&*inbox, kept).await.is_some(), "{kept} is kept");
    }
    assert_eq!(receive(&*inbox, &completed).await, Receipt::Stored);
}

/// A body of [`BODY_LIMIT`] bytes, every byte value in it, is stored and handed out byte for
/// byte.
pub async fn a_body_at_the_limit_is_stored_byte_for_byte(inbox: Arc<dyn Inbox>) {
    let id = unique_event_id("large");
    let body: Bytes = (0..BODY_LIMIT).map(|i| (i * 7 % 256) as u8).collect();
    let headers = headers();
    let event = ReceivedEvent::new(&id, TYPE, &body, &headers, PATH);
    assert_eq!(
        inbox.receive(&event).await.expect("receive"),
        Receipt::Stored
    );
    let taken = take_event(&*inbox, &id, LONG).await;
    assert!(taken.body == body, "the taken body differs");
    let record = inbox.show(&id).await.expect("show").expect("the event");
    assert!(record.body == body, "the shown body differs");
}

/// Events that share an ordering key are taken one at a time, in the order of receipt, while
/// events of other keys (or none) are taken beside them; the key is handed out with the event
/// and listed with it.
pub async fn events_of_one_key_are_taken_one_at_a_time_in_receipt_order(inbox: Arc<dyn Inbox>) {
    let (key, other) = (unique_event_id("key"), unique_event_id("other"));
    let first = stored_with_key(&*inbox, "keyed", &key).await;
    let second = stored_with_key(&*inbox, "keyed", &key).await;
    let beside = stored_with_key(&*inbox, "beside", &other).await;
    let third = stored_with_key(&*inbox, "keyed", &key).await;
    let unkeyed = stored(&*inbox, "unkeyed").await;

    let taken = take_event(&*inbox, &first, LONG).await;
    assert_eq!(taken.ordering_key.as_deref(), Some(key.as_str()));
    take_event(&*inbox, &beside, LONG).await;
    take_event(&*inbox, &unkeyed, LONG).await;
    assert!(
        take(&*inbox, LONG).await.is_none(),
        "the key's next event waits while its first is in flight"
    );
    complete(&*inbox, &taken.claimant(), LONG).await;
    let taken = take_event(&*inbox, &second, LONG).await;
    assert!(take(&*inbox, LONG).await.is_none(), "one at a time");
    complete(&*inbox, &taken.claimant(), LONG).await;
    take_event(&*inbox, &third, LONG).await;

    let listed = inbox
        .list(&Filter::new().with_ordering_key(&key))
        .await
        .expect("list");
    let ids: Vec<&str> = listed.iter().map(|event| event.event_id.as_str()).collect();
    assert_eq!(ids, [&first, &second, &third]);
    assert!(
        listed
            .iter()
            .all(|event| event.ordering_key.as_deref() == Some(key.as_str()))
    );
    let count = inbox
        .count(&Filter::new().with_ordering_key(&other))
        .await
        .expect("count");
    assert_eq!(count, 1);
}

/// An earlier event of a key that waits for its retry keeps the key's later events waiting
/// until it completes: the order is kept.
pub async fn a_key_waits_for_its_earlier_events_retry(inbox: Arc<dyn Inbox>) {
    let key = unique_event_id("key");
    let first = stored_with_key(&*inbox, "retried", &key).await;
    let second = stored_with_key(&*inbox, "after", &key).await;
    let taken = take_event(&*inbox, &first, LONG).await;
    let busy = NextAttempt::After(SHORT);
    fail(&*inbox, &taken.claimant(), "status 503: busy", busy).await;
    assert!(
        take(&*inbox, LONG).await.is_none(),
        "the key waits for its first event's retry"
    );
    tokio::time::sleep(PAST_SHORT).await;
    let retried = take_event(&*inbox, &first, LONG).await;
    assert_eq!(retried.attempt, 2);
    assert!(take(&*inbox, LONG).await.is_none());
    complete(&*inbox, &retried.claimant(), LONG).await;
    take_event(&*inbox, &second, LONG).await;
}

/// A dead event frees its key: the events after it are taken. Replayed, it takes the last
/// place in its key's order: it waits for the key's event in flight and the ones still waiting.
pub async fn a_dead_event_frees_its_key(inbox: Arc<dyn Inbox>) {
    let key = unique_event_id("key");
    let first = stored_with_key(&*inbox, "dies", &key).await;
    let second = stored_with_key(&*inbox, "next", &key).await;
    let third = stored_with_key(&*inbox, "last", &key).await;
    let taken = take_event(&*inbox, &first, LONG).await;
    fail(&*inbox, &taken.claimant(), "status 500", NextAttempt::Dead).await;
    let running = take_event(&*inbox, &second, LONG).await;

    assert_eq!(
        replay(&*inbox, &first, &Replay::new()).await,
        Replayed::Replayed
    );
    assert!(
        take(&*inbox, LONG).await.is_none(),
        "the replayed event waits for its key's event in flight"
    );
    complete(&*inbox, &running.claimant(), LONG).await;
    let last = take_event(&*inbox, &third, LONG).await;
    complete(&*inbox, &last.claimant(), LONG).await;
    take_event(&*inbox, &first, LONG).await;
}

/// A key's event whose lease ran out is taken over before the key's later events.
pub async fn a_keys_lost_lease_is_taken_over_first(inbox: Arc<dyn Inbox>) {
    let key = unique_event_id("key");
    let first = stored_with_key(&*inbox, "lost", &key).await;
    let second = stored_with_key(&*inbox, "after", &key).await;
    take_event(&*inbox, &first, SHORT).await;
    assert!(take(&*inbox, LONG).await.is_none(), "leased");
    tokio::time::sleep(PAST_SHORT).await;
    let again = take_event(&*inbox, &first, LONG).await;
    assert_eq!(again.attempt, 2);
    complete(&*inbox, &again.claimant(), LONG).await;
    take_event(&*inbox, &second, LONG).await;
}

/// Eight concurrent workers over 24 events of three keys never hold two events of one key at
/// once, take each key's events in the order of receipt, and take every event once.
pub async fn concurrent_takes_never_hold_two_events_of_one_key(inbox: Arc<dyn Inbox>) {
    use std::collections::HashMap;
    use std::sync::Mutex;

    let keys: Vec<String> = (0..3).map(|_| unique_event_id("key")).collect();
    let mut order: HashMap<String, Vec<String>> = HashMap::new();
    for n in 0..24 {
        let key = &keys[n % keys.len()];
        let id = stored_with_key(&*inbox, "concurrent", key).await;
        order.entry(key.clone()).or_default().push(id);
    }
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let taken: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (inbox, running, taken) = (inbox.clone(), running.clone(), taken.clone());
        workers.spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let done: usize = taken.lock().unwrap().values().map(Vec::len).sum();
                if done == 24 {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "24 events within 60 s"
                );
                let Some(event) = take(&*inbox, LONG).await else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let key = event.ordering_key.clone().expect("a keyed event");
                assert!(
                    running.lock().unwrap().insert(key.clone()),
                    "two events of one key held at once"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
                running.lock().unwrap().remove(&key);
                taken
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_default()
                    .push(event.event_id.clone());
                complete(&*inbox, &event.claimant(), LONG).await;
            }
        });
    }
    workers.join_all().await;
    assert_eq!(
        *taken.lock().unwrap(),
        order,
        "each key's events in the order of receipt"
    );
}

/// New events are taken before due retries ([`TakeOrder::FreshFirst`]), and in the order of
/// receipt with [`TakeOrder::Receipt`].
pub async fn fresh_events_are_taken_before_due_retries(inbox: Arc<dyn Inbox>) {
    let retry = stored(&*inbox, "retry").await;
    let taken = take_event(&*inbox, &retry, LONG).await;
    let now = NextAttempt::After(Duration::ZERO);
    fail(&*inbox, &taken.claimant(), "status 500", now).await;
    let fresh = stored(&*inbox, "fresh").await;
    let first = take_in(&*inbox, LONG, TakeOrder::FreshFirst).await;
    assert_eq!(first.as_ref().map(|event| &event.event_id), Some(&fresh));
    let second = take_in(&*inbox, LONG, TakeOrder::FreshFirst).await;
    let second = second.expect("the retry, after the new event");
    assert_eq!((&second.event_id, second.attempt), (&retry, 2));

    fail(&*inbox, &second.claimant(), "status 500", now).await;
    let later = stored(&*inbox, "later").await;
    let first = take_in(&*inbox, LONG, TakeOrder::Receipt).await;
    assert_eq!(first.map(|event| event.event_id), Some(retry));
    let second = take_in(&*inbox, LONG, TakeOrder::Receipt).await;
    assert_eq!(second.map(|event| event.event_id), Some(later));
}

/// A random history of receipts, takes, completions, failures, abandons, replays and discards
/// over a few events, applied to the inbox and to [`MemoryInbox`] alike: every answer and
/// every handed-out event agrees (leases and delays are long, so no answer depends on time).
/// Two of the events share an ordering key, one has a key of its own, one has none.
pub async fn reference_model(inbox: Arc<dyn Inbox>) {
    let reference = MemoryInbox::new();
    let ids: Vec<String> = (0..4).map(|_| unique_event_id("model")).collect();
    let (shared, own) = (unique_event_id("key"), unique_event_id("key"));
    let keys = [Some(&*shared), Some(&*shared), Some(&*own), None];
    let mut rng = fastrand::Rng::with_seed(0x5a9_0b0c);
    // The events each side holds, by position: (under test, reference).
    let mut held: Vec<(TakenEvent, TakenEvent)> = Vec::new();
    for step in 0..300 {
        let which = rng.usize(..ids.len());
        let (id, key) = (&ids[which], keys[which]);
        let operation = rng.u8(..8);
        let context = format!("step {step}: operation {operation} on {id}");
        match operation {
            0 | 1 => {
                let got = receive_with_key(&*inbox, id, key).await;
                let want = receive_with_key(&reference, id, key).await;
                assert_eq!(got, want, "{context}: receive");
            }
            2 | 3 => {
                let got = take(&*inbox, LONG).await;
                let want = take(&reference, LONG).await;
                assert_eq!(
                    got.as_ref().map(|t| (&t.event_id, t.attempt)),
                    want.as_ref().map(|t| (&t.event_id, t.attempt)),
                    "{context}: take"
                );
                if let (Some(got), Some(want)) = (got, want) {
                    held.push((got, want));
                }
            }
            4 if !held.is_empty() => {
                let (got, want) = held.swap_remove(rng.usize(..held.len()));
                let answer = complete(&*inbox, &got.claimant(), LONG).await;
                let expected = complete(&reference, &want.claimant(), LONG).await;
                assert_eq!(answer, expected, "{context}: complete {}", got.event_id);
            }
            5 if !held.is_empty() => {
                let (got, want) = held.swap_remove(rng.usize(..held.len()));
                let next = if rng.bool() {
                    NextAttempt::Dead
                } else {
                    NextAttempt::After(Duration::ZERO)
                };
                let answer = fail(&*inbox, &got.claimant(), "status 500", next).await;
                let expected = fail(&reference, &want.claimant(), "status 500", next).await;
                assert_eq!(answer, expected, "{context}: fail {}", got.event_id);
            }
            6 if !held.is_empty() => {
                let (got, want) = held.swap_remove(rng.usize(..held.len()));
                let answer = inbox.abandon(&got.claimant()).await.expect("abandon");
                let expected = reference.abandon(&want.claimant()).await.expect("abandon");
                assert_eq!(answer, expected, "{context}: abandon {}", got.event_id);
            }
            6 => {
                let answer = inbox.discard(id).await.expect("discard");
                assert_eq!(
                    answer,
                    reference.discard(id).await.expect("discard"),
                    "{context}: discard"
                );
            }
            _ => {
                let options = Replay::new().with_force(rng.bool());
                let answer = replay(&*inbox, id, &options).await;
                assert_eq!(
                    answer,
                    replay(&reference, id, &options).await,
                    "{context}: replay"
                );
            }
        }
        let got = inbox.stats().await.expect("stats");
        let want = reference.stats().await.expect("stats");
        assert_eq!(
            (got.received, got.in_flight, got.completed, got.dead),
            (want.received, want.in_flight, want.completed, want.dead),
            "{context}: stats"
        );
    }
}

/// Writes one `#[tokio::test]` per inbox conformance check, each with a fresh inbox from
/// `$make_inbox` (an expression evaluating to a future of an [`Inbox`] or of an
/// [`InboxUnderTest`]). Attributes for every test go before the expression, followed by `=>`,
/// as for [`idempotency_store_conformance!`](crate::idempotency_store_conformance).
///
/// ```
/// # mod wrapper {
/// use sangho_webhook::inbox::MemoryInbox;
///
/// sangho_webhook::inbox_conformance!(async { MemoryInbox::new() });
/// # }
/// ```
#[macro_export]
macro_rules! inbox_conformance {
    ($(#[$attribute:meta])+ => $make_inbox:expr $(,)?) => {
        $crate::__inbox_conformance_tests!(@every_check [$(#[$attribute])+] $make_inbox);
    };
    ($make_inbox:expr $(,)?) => {
        $crate::__inbox_conformance_tests!(@every_check [] $make_inbox);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __inbox_conformance_tests {
    (@every_check [$($attribute:tt)*] $make_inbox:expr) => {
        $crate::__inbox_conformance_tests! {
            [$($attribute)*] $make_inbox;
            receipt_stores_a_new_event_once,
            concurrent_receipts_store_once,
            a_duplicate_is_acknowledged_in_every_state,
            take_hands_out_events_in_receipt_order,
            concurrent_takes_never_take_one_event_twice,
            concurrent_takes_of_a_backlog_each_take_an_event,
            an_expired_lease_is_taken_over,
            renew_extends_the_lease,
            completion_is_owner_checked,
            a_failed_attempt_is_due_after_its_delay,
            a_dead_event_is_kept_and_never_taken,
            replay_makes_an_event_due_with_a_fresh_budget,
            abandon_makes_the_event_due_at_once_without_counting,
            discard_deletes_all_but_in_flight,
            stats_count_each_state,
            stats_by_type_count_each_state_per_type,
            list_and_count_select_by_state_type_and_time,
            the_purge_deletes_only_completed_events_past_their_retention,
            a_body_at_the_limit_is_stored_byte_for_byte,
            events_of_one_key_are_taken_one_at_a_time_in_receipt_order,
            a_key_waits_for_its_earlier_events_retry,
            a_dead_event_frees_its_key,
            a_keys_lost_lease_is_taken_over_first,
            concurrent_takes_never_hold_two_events_of_one_key,
            fresh_events_are_taken_before_due_retries,
            reference_model
        }
    };
    ([$($attribute:tt)*] $make_inbox:expr;) => {};
    ([$($attribute:tt)*] $make_inbox:expr; $check:ident $(, $rest:ident)*) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $($attribute)*
        async fn $check() {
            let under_test: $crate::testing::inbox_conformance::InboxUnderTest =
                ::core::convert::From::from($make_inbox.await);
            $crate::testing::inbox_conformance::$check(under_test.inbox()).await;
        }
        $crate::__inbox_conformance_tests!([$($attribute)*] $make_inbox; $($rest),*);
    };
}
