//! Inbox mode on MariaDB: a new event without an ordering key, received while a worker's take
//! waits for its turn, is written already taken under that worker's token and lease, and goes
//! to that worker at once, without a take that finds it: written on its own, or in a group's
//! statement beside other receipts. A worker that stopped waiting meanwhile gets nothing, and
//! the event is given back, due at once.
//!
//! A turn of takes is held up on purpose: a trigger of the test's own sleeps while the turn
//! writes one chosen event in flight, so that the takes that come meanwhile wait for the next
//! turn. And under load, with workers running beside the receipts, each event is handled once,
//! many of them handed off. Ignored by default (run with `-- --include-ignored` and
//! SANGHO_TEST_MYSQL_URL).
#![cfg(feature = "mariadb")]

mod common;

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex, Once},
    time::Duration,
};

use bytes::Bytes;
use sangho_webhook::{
    SanghoEvent, WebhookBody,
    inbox::{Inbox, InboxWorker, Receipt, ReceivedEvent, TakeOrder, TakenEvent},
    store::{ClaimToken, Claimant, Completion},
    testing::{conformance::unique_event_id, fixtures},
};
use sangho_webhook_sqlx::{
    GroupCommit, MariaDbStore,
    sqlx::{self, AssertSqlSafe},
};
use tokio::{task::JoinHandle, time::Instant};
use tracing_subscriber::layer::SubscriberExt;

use common::{LONG, TYPE};

/// How long the trigger holds up the turn that writes the chosen event in flight.
const HELD: Duration = Duration::from_secs(3);

/// Long enough for a take or a receipt to be where the test needs it.
const SETTLE: Duration = Duration::from_millis(300);

/// Receives `id` (its event's body, its path, no ordering key).
async fn receive(store: &MariaDbStore, id: &str) -> Receipt {
    let body = Bytes::from(fixtures::event_body(id, TYPE));
    let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    let event = ReceivedEvent::new(id, TYPE, &body, &headers, "/webhooks");
    store.receive(&event).await.expect("receive")
}

/// A take, new events first, for a long lease, in a task of its own: its token, and what it
/// takes.
fn take(store: &MariaDbStore) -> (ClaimToken, JoinHandle<Option<TakenEvent>>) {
    let (store, token) = (store.clone(), ClaimToken::generate());
    let task = tokio::spawn(async move {
        store
            .take(&token, LONG, TakeOrder::FreshFirst)
            .await
            .expect("take")
    });
    (token, task)
}

/// `id`'s state, attempts and claim token.
async fn row(store: &MariaDbStore, id: &str) -> (String, i64, Option<String>) {
    let sql = format!(
        "SELECT state, CAST(attempts AS SIGNED), claim_token FROM {} WHERE event_id = ?",
        store.table().as_str()
    );
    sqlx::query_as(AssertSqlSafe(sql))
        .bind(id)
        .fetch_one(store.pool())
        .await
        .expect("the event's row")
}

/// A store on a fresh table, writing with `group_commit`, whose trigger holds up for [`HELD`]
/// the write of `held` in flight (a take's) and the insert of `slow` (a receipt's).
async fn store_holding(
    label: &str,
    held: &str,
    slow: &str,
    group_commit: GroupCommit,
) -> common::TestStore<MariaDbStore> {
    let mut store = common::mariadb_store(label, 8).await;
    store.store = store.store.clone().with_group_commit(group_commit);
    let table = store.store.table().as_str().to_owned();
    for trigger in [
        format!(
            "CREATE TRIGGER {table}_held BEFORE UPDATE ON {table} FOR EACH ROW \
             SET @sangho_test_slept = IF(OLD.event_id = '{held}' AND NEW.state = 'in_flight', \
                                         SLEEP({}), 0)",
            HELD.as_secs_f64()
        ),
        format!(
            "CREATE TRIGGER {table}_slow BEFORE INSERT ON {table} FOR EACH ROW \
             SET @sangho_test_slept = IF(NEW.event_id = '{slow}', SLEEP({}), 0)",
            HELD.as_secs_f64()
        ),
    ] {
        sqlx::query(AssertSqlSafe(trigger))
            .execute(store.store.pool())
            .await
            .expect("the test's trigger");
    }
    store
}

/// A take that finds nothing, then a turn held up while it writes `held` in flight, and a
/// take that waits behind it: that take's token and task, and the held turn's.
async fn a_take_waiting_behind_a_held_turn(
    store: &MariaDbStore,
    held: &str,
) -> (
    (ClaimToken, JoinHandle<Option<TakenEvent>>),
    JoinHandle<Option<TakenEvent>>,
) {
    let (mut waiting, held_turn) = takes_waiting_behind_a_held_turn(store, held, 1).await;
    (waiting.remove(0), held_turn)
}

/// [`a_take_waiting_behind_a_held_turn`], with `count` takes waiting.
async fn takes_waiting_behind_a_held_turn(
    store: &MariaDbStore,
    held: &str,
    count: usize,
) -> (
    Vec<(ClaimToken, JoinHandle<Option<TakenEvent>>)>,
    JoinHandle<Option<TakenEvent>>,
) {
    // A first turn that finds nothing: the turns keep up.
    let (_, nothing) = take(store);
    assert!(nothing.await.expect("take").is_none(), "the table is empty");
    assert_eq!(receive(store, held).await, Receipt::Stored);
    let (_, held_turn) = take(store);
    tokio::time::sleep(SETTLE).await;
    assert!(
        !held_turn.is_finished(),
        "the trigger did not hold the turn"
    );
    let waiting = (0..count).map(|_| take(store)).collect();
    tokio::time::sleep(SETTLE).await;
    (waiting, held_turn)
}

/// The waiting takes got their events within a third of [`HELD`] of their receipts at
/// `received`, while `held_turn` still runs.
fn answered_while_the_turn_is_held(received: Instant, held_turn: &JoinHandle<Option<TakenEvent>>) {
    assert!(
        received.elapsed() < HELD / 3,
        "the events reached the waiting takes {:?} after their receipts",
        received.elapsed()
    );
    assert!(
        !held_turn.is_finished(),
        "the waiting takes were answered after the held turn"
    );
}

/// `id`, handed to the worker of `token`, is in flight under that token on its first attempt,
/// and that worker's completion of it is recorded.
async fn in_flight_under_and_completed(store: &MariaDbStore, id: &str, token: &ClaimToken) {
    assert_eq!(
        row(store, id).await,
        ("in_flight".to_owned(), 1, Some(token.as_str().to_owned())),
        "the event is in flight under the token of the worker it went to"
    );
    let claimant = Claimant::new(id, TYPE, token);
    assert_eq!(
        store.complete(&claimant, LONG).await.expect("complete"),
        Completion::Recorded
    );
}

/// The held turn, once the trigger lets it go, hands out the `held` event.
async fn the_held_turn_takes(held_turn: JoinHandle<Option<TakenEvent>>, held: &str) {
    let taken = held_turn.await.expect("take").expect("the held event");
    assert_eq!(taken.event_id, held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_new_event_goes_to_a_worker_whose_take_waits_on_mariadb() {
    let (held, fresh) = (unique_event_id("held"), unique_event_id("fresh"));
    let store = store_holding("hand_off", &held, "none", GroupCommit::OFF).await;
    let store = &store.store;
    let ((token, waiting), held_turn) = a_take_waiting_behind_a_held_turn(store, &held).await;

    let received = Instant::now();
    assert_eq!(receive(store, &fresh).await, Receipt::Stored);
    let taken = tokio::time::timeout(HELD, waiting)
        .await
        .expect("the waiting take was answered only after the held turn")
        .expect("take")
        .expect("the waiting take got an event");
    answered_while_the_turn_is_held(received, &held_turn);
    assert_eq!(taken.event_id, fresh);
    assert_eq!(taken.attempt, 1);
    assert_eq!(taken.body, Bytes::from(fixtures::event_body(&fresh, TYPE)));
    assert_eq!(taken.path, "/webhooks");
    in_flight_under_and_completed(store, &fresh, &token).await;

    the_held_turn_takes(held_turn, &held).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn new_events_of_a_group_go_to_the_workers_whose_takes_wait_on_mariadb() {
    const WAITING: usize = 4;
    let held = unique_event_id("held");
    let store = store_holding("hand_off_group", &held, "none", GroupCommit::MARIADB).await;
    let store = &store.store;
    let (waiting, held_turn) = takes_waiting_behind_a_held_turn(store, &held, WAITING).await;

    // Received at once: in one statement where they meet in a group, each on its own where
    // its caller finds the writer idle.
    let fresh: Vec<String> = (0..WAITING).map(|_| unique_event_id("fresh")).collect();
    let received = Instant::now();
    let mut receipts = tokio::task::JoinSet::new();
    for id in &fresh {
        let (store, id) = (store.clone(), id.clone());
        receipts.spawn(async move { receive(&store, &id).await });
    }
    while let Some(receipt) = receipts.join_next().await {
        assert_eq!(receipt.expect("a receipt"), Receipt::Stored);
    }
    let mut taken_ids = Vec::new();
    for (token, take) in waiting {
        let taken = tokio::time::timeout(HELD, take)
            .await
            .expect("a waiting take was answered only after the held turn")
            .expect("take")
            .expect("each waiting take got an event");
        assert_eq!(taken.attempt, 1);
        in_flight_under_and_completed(store, &taken.event_id, &token).await;
        taken_ids.push(taken.event_id);
    }
    answered_while_the_turn_is_held(received, &held_turn);
    taken_ids.sort();
    let mut fresh = fresh;
    fresh.sort();
    assert_eq!(taken_ids, fresh, "each new event went to one waiting take");

    the_held_turn_takes(held_turn, &held).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_duplicate_leaves_the_waiting_take_to_its_turn_on_mariadb() {
    let (done, held) = (unique_event_id("done"), unique_event_id("held"));
    let store = store_holding("hand_off_dup", &held, "none", GroupCommit::OFF).await;
    let store = &store.store;
    assert_eq!(receive(store, &done).await, Receipt::Stored);
    let (token, first) = take(store);
    assert_eq!(first.await.expect("take").expect("an event").event_id, done);
    let claimant = Claimant::new(&done, TYPE, &token);
    assert_eq!(
        store.complete(&claimant, LONG).await.expect("complete"),
        Completion::Recorded
    );
    let ((_, waiting), held_turn) = a_take_waiting_behind_a_held_turn(store, &held).await;

    assert_eq!(receive(store, &done).await, Receipt::Duplicate);
    tokio::time::sleep(SETTLE).await;
    assert!(
        !waiting.is_finished(),
        "a duplicate answered the waiting take"
    );
    the_held_turn_takes(held_turn, &held).await;
    // The waiting take's own turn finds nothing else.
    assert!(waiting.await.expect("take").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn an_event_handed_to_a_worker_that_stopped_waiting_is_given_back_on_mariadb() {
    let (held, slow) = (unique_event_id("held"), unique_event_id("slow"));
    let store = store_holding("hand_off_gone", &held, &slow, GroupCommit::OFF).await;
    let store = &store.store;
    let ((_, waiting), held_turn) = a_take_waiting_behind_a_held_turn(store, &held).await;

    // The receipt lends the waiting take, then its insert is held up; meanwhile the worker
    // stops waiting (its take times out).
    let receipt = {
        let (store, slow) = (store.clone(), slow.clone());
        tokio::spawn(async move { receive(&store, &slow).await })
    };
    tokio::time::sleep(SETTLE).await;
    waiting.abort();
    assert_eq!(receipt.await.expect("receive"), Receipt::Stored);
    assert_eq!(
        row(store, &slow).await,
        ("received".to_owned(), 0, None),
        "the event handed to a worker that had gone is due again, its attempt not counted"
    );
    the_held_turn_takes(held_turn, &held).await;
    let (_, next) = take(store);
    let taken = next.await.expect("take").expect("the given-back event");
    assert_eq!((taken.event_id.as_str(), taken.attempt), (slow.as_str(), 1));
}

/// The ids of the events handed to a waiting worker in this process, as the store traces
/// them.
static HANDED_OFF: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records the store's traces of a hand-off ([`HANDED_OFF`]), and lets no other event through.
struct RecordHandOffs;

impl RecordHandOffs {
    const TARGET: &str = "sangho_webhook_sqlx::hand_off";

    /// Records from now on, for the whole test binary.
    fn install() {
        static INSTALLED: Once = Once::new();
        INSTALLED.call_once(|| {
            let subscriber = tracing_subscriber::registry().with(RecordHandOffs);
            tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        });
    }

    /// How many of `ids` were handed off.
    fn of(ids: &[String]) -> usize {
        let handed_off = HANDED_OFF.lock().unwrap();
        ids.iter().filter(|id| handed_off.contains(id)).count()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RecordHandOffs {
    fn enabled(
        &self,
        metadata: &tracing::Metadata<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        metadata.target() == Self::TARGET
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        /// The event's `event_id` field.
        struct EventId(Option<String>);
        impl tracing::field::Visit for EventId {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "event_id" {
                    self.0 = Some(value.to_owned());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        if event.metadata().target() == Self::TARGET {
            let mut event_id = EventId(None);
            event.record(&mut event_id);
            HANDED_OFF.lock().unwrap().extend(event_id.0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn receipts_beside_running_workers_are_each_handled_once_on_mariadb() {
    each_handled_once_beside_running_workers("hand_off_many", GroupCommit::OFF).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn grouped_receipts_beside_running_workers_are_each_handled_once_on_mariadb() {
    each_handled_once_beside_running_workers("hand_off_grouped", GroupCommit::MARIADB).await;
}

/// 800 receipts from 32 senders, written with `group_commit`, beside 16 running workers: each
/// event handled once and completed, some of them handed to a waiting worker.
async fn each_handled_once_beside_running_workers(label: &str, group_commit: GroupCommit) {
    const SENDERS: usize = 32;
    const EACH: usize = 25;
    RecordHandOffs::install();
    let store = common::mariadb_store(label, 16).await;
    let inbox = store.store.clone().with_group_commit(group_commit);
    let handled: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let handler = {
        let handled = handled.clone();
        tower::service_fn(move |request: http::Request<WebhookBody>| {
            let event = request
                .extensions()
                .get::<SanghoEvent>()
                .expect("the event");
            *handled
                .lock()
                .unwrap()
                .entry(event.id().to_owned())
                .or_default() += 1;
            async { Ok::<_, Infallible>(http::Response::new(WebhookBody::from_static(b""))) }
        })
    };
    let worker = InboxWorker::builder(inbox.clone(), handler)
        .with_concurrency(16)
        .build()
        .expect("a worker")
        .start();

    let ids: Vec<String> = (0..SENDERS * EACH)
        .map(|_| unique_event_id("many"))
        .collect();
    let mut senders = tokio::task::JoinSet::new();
    for chunk in ids.chunks(EACH) {
        let (inbox, chunk) = (inbox.clone(), chunk.to_vec());
        senders.spawn(async move {
            for id in chunk {
                assert_eq!(receive(&inbox, &id).await, Receipt::Stored);
            }
        });
    }
    while let Some(sent) = senders.join_next().await {
        sent.expect("a sender");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled.lock().unwrap().len() < ids.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.shutdown(Duration::from_secs(5)).await;
    let handed_off = RecordHandOffs::of(&ids);

    let handled = handled.lock().unwrap().clone();
    let lost: Vec<&String> = ids.iter().filter(|id| !handled.contains_key(*id)).collect();
    let doubled: Vec<(&String, &usize)> = handled.iter().filter(|(_, n)| **n > 1).collect();
    eprintln!(
        "{} events received beside 16 running workers ({group_commit:?}): {handed_off} handed \
         to a waiting worker",
        ids.len()
    );
    assert!(
        lost.is_empty(),
        "{} events never handled, the first {:?}",
        lost.len(),
        lost.first()
    );
    assert!(
        doubled.is_empty(),
        "events handled more than once: {doubled:?}"
    );
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE state <> 'completed'",
        inbox.table().as_str()
    );
    let unfinished: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(inbox.pool())
        .await
        .expect("a count");
    assert_eq!(
        unfinished, 0,
        "events handled but not recorded as completed"
    );
    assert!(
        handed_off > 0,
        "no event was handed to a waiting worker: the check tested only the takes"
    );
}
