//! Group commit (on by default: `GroupCommit::SQLITE` on SQLite, `GroupCommit::POSTGRES` on PostgreSQL): the writes waiting together are
//! written in one transaction, and each caller gets the answer its own statement gives.
//!
//! On SQLite:
//! Each test gathers a group the same way: a connection of its own holds SQLite's write lock
//! (a handler's transaction, `BEGIN IMMEDIATE`), so that the store's writer waits for the lock
//! with its first write, while the test queues the others behind it. Once the lock is released
//! the writer commits the first write, then everything queued meanwhile as one group.
//! Not ignored: SQLite needs no server.
//!
//! On PostgreSQL (ignored by default: run with `--include-ignored`): a row held by a handler's
//! transaction holds up no other write of the group it lands in.

mod common;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use common::{postgres_row_held, postgres_store, postgres_store_grouped_by, sqlite_store_at};
use sangho_webhook::{
    inbox::{
        EventState, FailedAttempt, Failure, Inbox, NextAttempt, Receipt, ReceivedEvent, TakeOrder,
        TakenEvent,
    },
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Renewal, StoreError},
    testing::conformance::unique_event_id,
};
use sangho_webhook_sqlx::{
    GroupCommit, SqliteStore,
    sqlx::{self, Connection, Executor, sqlite::SqliteConnection},
};
use tokio::task::JoinSet;

const LEASE: Duration = Duration::from_secs(30);
const TYPE: &str = "charge.succeeded";

/// A migrated store on a temporary file, and the file's URL.
async fn store() -> (SqliteStore, String, tempfile::TempDir) {
    store_of_connections(8).await
}

/// [`store`] over a pool of `connections`.
async fn store_of_connections(connections: u32) -> (SqliteStore, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("group.db");
    let store = sqlite_store_at(&path, connections).await;
    store.migrate().await.unwrap();
    assert!(store.group_commit().is_on(), "grouping is SQLite's default");
    (store, format!("sqlite://{}", path.display()), dir)
}

/// Creates a trigger that refuses a write (`BEFORE {on}`) of the rows matching `when`, as a
/// constraint of the user's could.
async fn refuse(store: &SqliteStore, on: &str, when: &str) {
    let trigger = format!(
        "CREATE TRIGGER refuse_poison BEFORE {on} ON processed_webhook_events \
         WHEN {when} BEGIN SELECT RAISE(ABORT, 'refused'); END"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(trigger))
        .execute(store.pool())
        .await
        .unwrap();
}

/// A connection holding SQLite's write lock until it is committed.
async fn hold_write_lock(url: &str) -> SqliteConnection {
    let mut connection = SqliteConnection::connect(url).await.unwrap();
    connection.execute("BEGIN IMMEDIATE").await.unwrap();
    connection
}

/// Lets the lock go after the queued writes have had time to reach the queue.
async fn release_write_lock(mut connection: SqliteConnection) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    connection.execute("COMMIT").await.unwrap();
}

async fn claim(
    store: &impl IdempotencyStore,
    id: &str,
    token: &ClaimToken,
) -> Result<Claim, StoreError> {
    store.claim(Claimant::new(id, TYPE, token), LEASE).await
}

/// Starts a write that takes the writer into the wait for the lock; the writes spawned after
/// it queue behind it.
async fn occupy_the_writer(store: &SqliteStore, set: &mut JoinSet<()>) {
    let store = store.clone();
    set.spawn(async move {
        let token = ClaimToken::generate();
        let id = unique_event_id("first");
        assert_eq!(claim(&store, &id, &token).await.unwrap(), Claim::Acquired);
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Two events before a group: one completed, and one in flight under another delivery's
/// claim (their ids).
async fn a_completed_and_an_in_flight_event(store: &impl IdempotencyStore) -> (String, String) {
    let (completed, token) = (unique_event_id("completed"), ClaimToken::generate());
    assert_eq!(
        claim(store, &completed, &token).await.unwrap(),
        Claim::Acquired
    );
    let claimant = Claimant::new(&completed, TYPE, &token);
    IdempotencyStore::complete(store, claimant, Duration::from_secs(3600))
        .await
        .unwrap();
    let in_flight = unique_event_id("in-flight");
    assert_eq!(
        claim(store, &in_flight, &ClaimToken::generate())
            .await
            .unwrap(),
        Claim::Acquired
    );
    (completed, in_flight)
}

/// A claim of each of `ids` by a delivery of its own, each answered with its id.
fn spawn_claims_of<'a, S>(
    store: &S,
    ids: impl Iterator<Item = &'a String>,
) -> JoinSet<(String, Claim)>
where
    S: IdempotencyStore + Clone + 'static,
{
    let mut claims = JoinSet::new();
    for id in ids {
        let (store, id) = (store.clone(), id.clone());
        claims.spawn(async move {
            let answer = claim(&store, &id, &ClaimToken::generate()).await;
            (id, answer.expect("no claim fails"))
        });
    }
    claims
}

/// Asserts that each of `claims` answered as alone, beside the events of
/// [`a_completed_and_an_in_flight_event`]: a new event acquired.
async fn each_claim_answers_as_alone(
    claims: JoinSet<(String, Claim)>,
    completed: &str,
    in_flight: &str,
) {
    for (id, answer) in claims.join_all().await {
        let alone = match id {
            _ if id == completed => Claim::Completed,
            _ if id == in_flight => Claim::InFlight,
            _ => Claim::Acquired,
        };
        assert_eq!(answer, alone, "the claim of {id}");
    }
}

/// The body of every event the tests receive.
static BODY: Bytes = Bytes::from_static(b"{}");

/// An event stored before the group (its id): its receipt in the group is a duplicate.
async fn a_stored_event(store: &impl Inbox) -> String {
    let known = unique_event_id("known");
    let event = ReceivedEvent::new(&known, TYPE, &BODY, &[], "/");
    assert_eq!(store.receive(&event).await.unwrap(), Receipt::Stored);
    known
}

/// Spawns a receipt of `id`, with the ordering key `key`, answered with its id.
fn spawn_receipt<S>(
    receipts: &mut JoinSet<(String, Receipt)>,
    store: &S,
    id: &str,
    key: Option<&str>,
) where
    S: Inbox + Clone + 'static,
{
    let (store, id, key) = (store.clone(), id.to_owned(), key.map(str::to_owned));
    receipts.spawn(async move {
        let event =
            ReceivedEvent::new(&id, TYPE, &BODY, &[], "/").with_ordering_key(key.as_deref());
        let receipt = store.receive(&event).await.expect("no receipt fails");
        (id, receipt)
    });
}

/// Asserts that each of `receipts` stored its event, but the receipt of `known` (from
/// [`a_stored_event`]), a duplicate.
async fn each_receipt_answers_as_alone(receipts: JoinSet<(String, Receipt)>, known: &str) {
    for (id, receipt) in receipts.join_all().await {
        let alone = match id == known {
            true => Receipt::Duplicate,
            false => Receipt::Stored,
        };
        assert_eq!(receipt, alone, "the receipt of {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_one_id_in_one_group_acquire_once() {
    let (store, url, _dir) = store().await;
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let id = unique_event_id("same");
    let mut claims = JoinSet::new();
    for _ in 0..20 {
        let (store, id) = (store.clone(), id.clone());
        claims.spawn(async move { claim(&store, &id, &ClaimToken::generate()).await });
    }
    release_write_lock(lock).await;
    first.join_all().await;
    let answers: Vec<Claim> = claims
        .join_all()
        .await
        .into_iter()
        .map(|answer| answer.expect("no claim fails"))
        .collect();
    let acquired = answers.iter().filter(|c| **c == Claim::Acquired).count();
    assert_eq!(acquired, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|c| matches!(c, Claim::Acquired | Claim::InFlight))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_and_a_completion_of_one_id_in_one_group_answer_in_their_order() {
    let (store, url, _dir) = store().await;
    let (id, owner) = (unique_event_id("pair"), ClaimToken::generate());
    assert_eq!(claim(&store, &id, &owner).await.unwrap(), Claim::Acquired);
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let completion = tokio::spawn({
        let (store, id) = (store.clone(), id.clone());
        async move {
            let claimant = Claimant::new(&id, TYPE, &owner);
            IdempotencyStore::complete(&store, claimant, Duration::from_secs(3600)).await
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let redelivery = tokio::spawn({
        let (store, id) = (store.clone(), id.clone());
        async move { claim(&store, &id, &ClaimToken::generate()).await }
    });
    release_write_lock(lock).await;
    first.join_all().await;
    assert_eq!(completion.await.unwrap().unwrap(), Completion::Recorded);
    // Queued after the completion, in the same group: it sees the event completed.
    assert_eq!(redelivery.await.unwrap().unwrap(), Claim::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takes_in_one_group_never_take_two_events_of_one_key() {
    let (store, url, _dir) = store().await;
    let key = unique_event_id("object");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = unique_event_id("keyed");
        let event = ReceivedEvent::new(&id, TYPE, &BODY, &[], "/").with_ordering_key(Some(&key));
        assert_eq!(store.receive(&event).await.unwrap(), Receipt::Stored);
        ids.push(id);
    }
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let mut takes = JoinSet::new();
    for _ in 0..8 {
        let store = store.clone();
        takes.spawn(async move {
            let token = ClaimToken::generate();
            store.take(&token, LEASE, TakeOrder::FreshFirst).await
        });
    }
    release_write_lock(lock).await;
    first.join_all().await;
    let taken: Vec<String> = takes
        .join_all()
        .await
        .into_iter()
        .filter_map(|taken| taken.expect("no take fails"))
        .map(|event| event.event_id)
        .collect();
    assert_eq!(taken, [ids[0].clone()], "only the key's first event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_completions_of_many_events_in_one_group_each_answer_as_alone() {
    let (store, url, _dir) = store().await;
    let retention = Duration::from_secs(3600);
    // Before the group: one event completed, two in flight under another delivery's claim,
    // and five held by the deliveries that complete them in the group.
    let (completed, in_flight) = a_completed_and_an_in_flight_event(&store).await;
    let others = unique_event_id("others");
    assert_eq!(
        claim(&store, &others, &ClaimToken::generate())
            .await
            .unwrap(),
        Claim::Acquired
    );
    let mut held = Vec::new();
    for _ in 0..5 {
        let (id, token) = (unique_event_id("held"), ClaimToken::generate());
        assert_eq!(claim(&store, &id, &token).await.unwrap(), Claim::Acquired);
        held.push((id, token));
    }
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let fresh: Vec<String> = (0..12).map(|_| unique_event_id("fresh")).collect();
    let claims = spawn_claims_of(&store, fresh.iter().chain([&completed, &in_flight]));
    let mut completions = JoinSet::new();
    for (id, token) in held.clone() {
        let store = store.clone();
        completions.spawn(async move {
            let claimant = Claimant::new(&id, TYPE, &token);
            IdempotencyStore::complete(&store, claimant, retention).await
        });
    }
    // A completion by a delivery that does not hold the event.
    let stranger = tokio::spawn({
        let (store, id) = (store.clone(), others.clone());
        async move {
            let token = ClaimToken::generate();
            let claimant = Claimant::new(&id, TYPE, &token);
            IdempotencyStore::complete(&store, claimant, retention).await
        }
    });
    release_write_lock(lock).await;
    first.join_all().await;
    each_claim_answers_as_alone(claims, &completed, &in_flight).await;
    for answer in completions.join_all().await {
        assert_eq!(answer.unwrap(), Completion::Recorded);
    }
    assert_eq!(stranger.await.unwrap().unwrap(), Completion::TakenOver);
    // Each answer was durable: a redelivery of every event now finds it.
    for (id, _) in &held {
        assert_eq!(
            claim(&store, id, &ClaimToken::generate()).await.unwrap(),
            Claim::Completed
        );
    }
    for id in &fresh {
        assert_eq!(
            claim(&store, id, &ClaimToken::generate()).await.unwrap(),
            Claim::InFlight
        );
    }
}

/// A group of only claims, among them an event completed and one in flight: each claim
/// answers as it would alone (the claims the statement of many rows did not acquire are read
/// by `state_many.sql`, in the group's transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_alone_in_one_group_each_answer_as_alone() {
    let (store, url, _dir) = store().await;
    let (completed, in_flight) = a_completed_and_an_in_flight_event(&store).await;
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let fresh: Vec<String> = (0..12).map(|_| unique_event_id("fresh")).collect();
    let claims = spawn_claims_of(&store, fresh.iter().chain([&completed, &in_flight]));
    release_write_lock(lock).await;
    first.join_all().await;
    each_claim_answers_as_alone(claims, &completed, &in_flight).await;
}

/// A group of only receipts without a key is one statement of many rows, which SQLite runs
/// alone, outside a transaction: each receipt is answered once that statement has committed,
/// and a store opened afresh on the file finds every event answered stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_alone_in_one_group_are_each_durable_once_answered() {
    let (store, url, dir) = store().await;
    let known = a_stored_event(&store).await;
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let mut receipts = JoinSet::new();
    let fresh: Vec<String> = (0..12).map(|_| unique_event_id("fresh")).collect();
    for id in fresh.iter().chain([&known]) {
        spawn_receipt(&mut receipts, &store, id, None);
    }
    release_write_lock(lock).await;
    first.join_all().await;
    each_receipt_answers_as_alone(receipts, &known).await;
    let reopened = sqlite_store_at(&dir.path().join("group.db"), 2).await;
    for id in &fresh {
        let event = ReceivedEvent::new(id, TYPE, &BODY, &[], "/");
        assert_eq!(
            reopened.receive(&event).await.unwrap(),
            Receipt::Duplicate,
            "{id} was stored"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_of_one_id_in_one_group_answer_each_its_own() {
    let (store, url, _dir) = store().await;
    let (id, owner) = (unique_event_id("twice"), ClaimToken::generate());
    assert_eq!(claim(&store, &id, &owner).await.unwrap(), Claim::Acquired);
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let complete = |token: ClaimToken| {
        let (store, id) = (store.clone(), id.clone());
        tokio::spawn(async move {
            let claimant = Claimant::new(&id, TYPE, &token);
            IdempotencyStore::complete(&store, claimant, Duration::from_secs(3600)).await
        })
    };
    // A delivery that does not hold the event completes first, then the owner, in one group.
    let stranger = complete(ClaimToken::generate());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let owner = complete(owner);
    release_write_lock(lock).await;
    first.join_all().await;
    assert_eq!(stranger.await.unwrap().unwrap(), Completion::TakenOver);
    assert_eq!(owner.await.unwrap().unwrap(), Completion::Recorded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_in_one_group_keep_the_order_of_their_key_and_answer_duplicates() {
    let (store, url, _dir) = store().await;
    let known = a_stored_event(&store).await;
    let key = unique_event_id("object");
    let keyed: Vec<String> = (0..3).map(|_| unique_event_id("keyed")).collect();
    let unkeyed: Vec<String> = (0..8).map(|_| unique_event_id("unkeyed")).collect();
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let mut receipts = JoinSet::new();
    // The key's events are queued in this order, among events without a key and a duplicate.
    for (index, id) in keyed.iter().enumerate() {
        spawn_receipt(&mut receipts, &store, id, Some(&key));
        spawn_receipt(&mut receipts, &store, &unkeyed[index], None);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    spawn_receipt(&mut receipts, &store, &known, None);
    for id in &unkeyed[3..] {
        spawn_receipt(&mut receipts, &store, id, None);
    }
    release_write_lock(lock).await;
    first.join_all().await;
    each_receipt_answers_as_alone(receipts, &known).await;
    // The key's events are taken in the order they were received, one at a time.
    let mut taken_of_key = Vec::new();
    let mut taken = 0;
    while let Some(event) = store
        .take(&ClaimToken::generate(), LEASE, TakeOrder::FreshFirst)
        .await
        .unwrap()
    {
        taken += 1;
        if keyed.contains(&event.event_id) {
            taken_of_key.push(event.event_id.clone());
        }
        let retention = Duration::from_secs(3600);
        Inbox::complete(&store, &event.claimant(), retention)
            .await
            .unwrap();
    }
    assert_eq!(taken_of_key, keyed);
    assert_eq!(taken, 1 + keyed.len() + unkeyed.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_completions_of_many_events_in_one_group_each_answer_as_alone() {
    let (store, url, _dir) = store().await;
    let mut taken = Vec::new();
    for _ in 0..7 {
        let id = unique_event_id("inbox");
        let event = ReceivedEvent::new(&id, TYPE, &BODY, &[], "/");
        assert_eq!(store.receive(&event).await.unwrap(), Receipt::Stored);
        let token = ClaimToken::generate();
        let event = store
            .take(&token, LEASE, TakeOrder::FreshFirst)
            .await
            .unwrap();
        taken.push((event.expect("an event is due").event_id, token));
    }
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    // Six completions by the workers that hold their events, one by a worker that does not.
    let mut completions = JoinSet::new();
    for (index, (id, token)) in taken.iter().cloned().enumerate() {
        let store = store.clone();
        let token = if index == 6 {
            ClaimToken::generate()
        } else {
            token
        };
        completions.spawn(async move {
            let claimant = Claimant::new(&id, TYPE, &token);
            let completion = Inbox::complete(&store, &claimant, Duration::from_secs(3600));
            (index, completion.await.expect("no completion fails"))
        });
    }
    release_write_lock(lock).await;
    first.join_all().await;
    for (index, completion) in completions.join_all().await {
        let expected = match index {
            6 => Completion::TakenOver,
            _ => Completion::Recorded,
        };
        assert_eq!(completion, expected, "the completion of event {index}");
    }
    // The six are completed; the seventh is still its worker's.
    for (index, (id, _)) in taken.iter().enumerate() {
        let expected = match index {
            6 => EventState::InFlight,
            _ => EventState::Completed,
        };
        let record = store.show(id).await.unwrap().expect("the event is stored");
        assert_eq!(record.summary.state, expected, "the state of event {index}");
    }
}

/// Receives an event and takes it: its id and the worker's token.
async fn a_taken_event(store: &SqliteStore) -> (String, ClaimToken) {
    let id = a_stored_event(store).await;
    let token = ClaimToken::generate();
    let taken = store.take(&token, LEASE, TakeOrder::FreshFirst).await;
    let taken = taken.unwrap().expect("an event is due");
    assert_eq!(taken.event_id, id, "the only due event");
    (id, token)
}

/// `taken` events received and taken (their ids and their workers' tokens), then `due` events
/// received (their ids).
async fn taken_and_due(
    store: &SqliteStore,
    taken: usize,
    due: usize,
) -> (Vec<(String, ClaimToken)>, Vec<String>) {
    let mut held = Vec::new();
    for _ in 0..taken {
        held.push(a_taken_event(store).await);
    }
    let mut waiting = Vec::new();
    for _ in 0..due {
        waiting.push(a_stored_event(store).await);
    }
    (held, waiting)
}

/// Completions and takes spawned as a drain's workers make them.
#[derive(Default)]
struct Drain {
    completions: JoinSet<(String, Result<Completion, StoreError>)>,
    takes: JoinSet<Result<Option<TakenEvent>, StoreError>>,
}

impl Drain {
    /// The completion of each of `held` by its worker, and that worker's next take.
    fn complete_and_take(&mut self, store: &SqliteStore, held: &[(String, ClaimToken)]) {
        for (id, token) in held {
            self.complete(store, id, *token);
            let store = store.clone();
            self.takes.spawn(async move {
                let token = ClaimToken::generate();
                store.take(&token, LEASE, TakeOrder::FreshFirst).await
            });
        }
    }

    fn complete(&mut self, store: &SqliteStore, id: &str, token: ClaimToken) {
        let (store, id) = (store.clone(), id.to_owned());
        self.completions.spawn(async move {
            let claimant = Claimant::new(&id, TYPE, &token);
            let completion = Inbox::complete(&store, &claimant, Duration::from_secs(3600));
            (id.clone(), completion.await)
        });
    }

    /// Checks that each completion but `refused`'s is recorded, and that the takes took the
    /// `due` events, each its own.
    async fn answers_as_alone(self, refused: Option<&str>, mut due: Vec<String>) {
        for (id, completion) in self.completions.join_all().await {
            match Some(id.as_str()) == refused {
                true => assert!(completion.is_err(), "the refused completion fails"),
                false => assert_eq!(completion.unwrap(), Completion::Recorded, "{id}"),
            }
        }
        let mut taken: Vec<String> = self
            .takes
            .join_all()
            .await
            .into_iter()
            .map(|taken| taken.expect("no take fails").expect("an event is due"))
            .map(|event| event.event_id)
            .collect();
        taken.sort();
        due.sort();
        assert_eq!(taken, due, "each take takes its own due event");
    }
}

/// Closes `store`'s pool and checks the state of each event with a store opened afresh on its
/// file at `url`: each answer was committed.
async fn a_fresh_store_finds<'a>(
    store: SqliteStore,
    url: &str,
    states: impl IntoIterator<Item = (&'a String, EventState)>,
) {
    store.pool().close().await;
    let reopened = SqliteStore::connect(url).await.unwrap();
    for (id, expected) in states {
        let record = reopened
            .show(id)
            .await
            .unwrap()
            .expect("the event is stored");
        assert_eq!(record.summary.state, expected, "{id} was committed");
    }
}

/// A drain's group: workers' completions and their next takes, two statements of many rows
/// in one transaction whose `BEGIN` and `COMMIT` ride along with them. Each is answered as
/// alone, and only once committed: a store opened afresh on the file finds each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_completions_and_takes_in_one_group_are_each_durable_once_answered() {
    let (store, url, _dir) = store().await;
    let (held, due) = taken_and_due(&store, 6, 6).await;
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let mut drain = Drain::default();
    drain.complete_and_take(&store, &held);
    release_write_lock(lock).await;
    first.join_all().await;
    drain.answers_as_alone(None, due.clone()).await;
    let completed = held.iter().map(|(id, _)| (id, EventState::Completed));
    let taken = due.iter().map(|id| (id, EventState::InFlight));
    a_fresh_store_finds(store, &url, completed.chain(taken)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_caller_left_while_it_waited_is_never_made() {
    let (store, url, _dir) = store().await;
    let id = unique_event_id("left");
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        claim(&store, &id, &ClaimToken::generate()),
    )
    .await;
    assert!(gave_up.is_err(), "the claim waits for its group");
    release_write_lock(lock).await;
    first.join_all().await;
    // The abandoned claim was never written: the event is free.
    let later = ClaimToken::generate();
    assert_eq!(claim(&store, &id, &later).await.unwrap(), Claim::Acquired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_write_fails_alone_and_its_group_is_written() {
    let (store, url, _dir) = store().await;
    // One event id refused.
    let poison = unique_event_id("poison");
    refuse(&store, "INSERT", &format!("NEW.event_id = '{poison}'")).await;
    let lock = hold_write_lock(&url).await;
    let mut first = JoinSet::new();
    occupy_the_writer(&store, &mut first).await;
    let mut claims = JoinSet::new();
    let ids: Vec<String> = (0..10).map(|_| unique_event_id("healthy")).collect();
    for id in ids
        .iter()
        .take(5)
        .chain([&poison])
        .chain(ids.iter().skip(5))
    {
        let (store, id) = (store.clone(), id.clone());
        claims.spawn(async move {
            (
                id.clone(),
                claim(&store, &id, &ClaimToken::generate()).await,
            )
        });
    }
    release_write_lock(lock).await;
    first.join_all().await;
    for (id, answer) in claims.join_all().await {
        match id == poison {
            true => assert!(answer.is_err(), "the refused claim fails: {answer:?}"),
            false => assert_eq!(answer.unwrap(), Claim::Acquired, "{id}"),
        }
    }
    // And they are durable: a new pool sees each as in flight.
    store.pool().close().await;
    let reopened = SqliteStore::connect(&url).await.unwrap();
    for id in &ids {
        assert_eq!(
            claim(&reopened, id, &ClaimToken::generate()).await.unwrap(),
            Claim::InFlight
        );
    }
}

/// Claims `ids`, each in a task of its own: each answer, and how long it took.
fn spawn_claims(
    store: &SqliteStore,
    ids: &[String],
    claims: &mut JoinSet<(String, Duration, Result<Claim, StoreError>)>,
) {
    for id in ids {
        let (store, id) = (store.clone(), id.clone());
        claims.spawn(async move {
            let started = std::time::Instant::now();
            let answer = claim(&store, &id, &ClaimToken::generate()).await;
            (id, started.elapsed(), answer)
        });
    }
}

/// On a pool of one connection, a drain's group (completions and takes, its `BEGIN` riding
/// along with the first statement) whose statement fails leaves no transaction open on the
/// connection it gives back: the writes that then run alone, on that same connection, are each
/// committed (a store opened afresh finds them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_group_leaves_no_transaction_open_on_a_pool_of_one_connection() {
    // A pool of one connection, as SQLite's single writer invites.
    let (store, url, _dir) = store_of_connections(1).await;
    let (mut held, due) = taken_and_due(&store, 5, 4).await;
    let (first, first_token) = held.pop().expect("five taken events");
    // One event's completion refused.
    let poison = held[0].0.clone();
    let when = format!("NEW.event_id = '{poison}' AND NEW.state = 'completed'");
    refuse(&store, "UPDATE", &when).await;
    let connection = store.pool().acquire().await.unwrap();
    // A first completion: the writer takes it alone and waits for the connection, and the
    // writes spawned after it queue as one group behind it.
    let mut drain = Drain::default();
    drain.complete(&store, &first, first_token);
    tokio::time::sleep(Duration::from_millis(50)).await;
    drain.complete_and_take(&store, &held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(connection);
    drain.answers_as_alone(Some(&poison), due.clone()).await;
    let completed = held.iter().map(|(id, _)| match *id == poison {
        true => (id, EventState::InFlight),
        false => (id, EventState::Completed),
    });
    let taken = due.iter().map(|id| (id, EventState::InFlight));
    a_fresh_store_finds(store, &url, completed.chain(taken)).await;
}

/// On a pool of one connection, a write left alone behind a group (queued while the group
/// waited for the connection) is written on the connection the writer kept from the group,
/// at once: it does not wait for a second connection the pool does not have (the pool's
/// acquire timeout, then a failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_write_after_a_group_on_a_pool_of_one_connection_is_written_at_once() {
    let (store, _url, _dir) = store_of_connections(1).await;
    let held = store.pool().acquire().await.unwrap();
    let mut claims = JoinSet::new();
    let group: Vec<String> = (0..5).map(|_| unique_event_id("group")).collect();
    spawn_claims(&store, &group, &mut claims);
    // The writer has taken the group and waits for the connection; the last claim queues.
    tokio::time::sleep(Duration::from_millis(100)).await;
    spawn_claims(&store, &[unique_event_id("lone")], &mut claims);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(held);
    for (id, took, answer) in claims.join_all().await {
        assert_eq!(answer.expect("no claim fails"), Claim::Acquired, "{id}");
        assert!(
            took < Duration::from_secs(3),
            "{id} answered after {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_transaction_holding_the_lock_fails_no_grouped_write() {
    let (store, url, _dir) = store().await;
    // Unbatched, each claim would wait for the lock through the busy timeout (2 s); grouped,
    // they wait for it once, together, and none fails.
    let lock = hold_write_lock(&url).await;
    let mut claims = JoinSet::new();
    for _ in 0..50 {
        let store = store.clone();
        claims.spawn(async move {
            let started = tokio::time::Instant::now();
            let answer = claim(&store, &unique_event_id("held"), &ClaimToken::generate()).await;
            (answer, started.elapsed())
        });
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    lock_commit(lock).await;
    for (answer, waited) in claims.join_all().await {
        assert_eq!(answer.expect("no claim fails"), Claim::Acquired);
        assert!(
            waited < Duration::from_millis(1_800),
            "answered after {waited:?}"
        );
    }
}

async fn lock_commit(mut connection: SqliteConnection) {
    connection.execute("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_grouping_off_each_write_commits_alone() {
    let (store, _url, _dir) = store().await;
    let store = store.with_group_commit(GroupCommit::OFF);
    assert!(!store.group_commit().is_on());
    let store = Arc::new(store);
    let mut claims = JoinSet::new();
    for _ in 0..20 {
        let store = store.clone();
        claims.spawn(async move {
            claim(&store, &unique_event_id("off"), &ClaimToken::generate()).await
        });
    }
    for answer in claims.join_all().await {
        assert_eq!(answer.unwrap(), Claim::Acquired);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_row_held_by_a_handler_transaction_holds_up_no_other_claim_on_postgres() {
    let test_store = postgres_store("group_held", 16).await;
    let by_default = sangho_webhook_sqlx::PostgresStore::new(test_store.pool().clone());
    assert_eq!(
        by_default.group_commit(),
        GroupCommit::POSTGRES,
        "PostgreSQL groups by default"
    );
    let store = test_store.store.clone().with_group_commit(ONE_WRITER);
    let (held, owner) = (unique_event_id("held"), ClaimToken::generate());
    let claimant = Claimant::new(&held, TYPE, &owner);
    assert_eq!(store.claim(claimant, LEASE).await.unwrap(), Claim::Acquired);
    // A handler's transaction holds the event's row for 2.5 s, longer than the store's lock
    // timeout (2 s).
    let handler = postgres_row_held(&store, &held).await;
    let redelivery = tokio::spawn({
        let (store, held) = (store.clone(), held.clone());
        async move {
            let started = tokio::time::Instant::now();
            let answer = store
                .claim(Claimant::new(&held, TYPE, &ClaimToken::generate()), LEASE)
                .await;
            (answer, started.elapsed())
        }
    });
    // Fresh events, arriving while the redelivery waits for the row (alone in its group).
    let mut fresh = JoinSet::new();
    for n in 0..40 {
        let store = store.clone();
        fresh.spawn(async move {
            tokio::time::sleep(Duration::from_millis(50 + n * 5)).await;
            let started = tokio::time::Instant::now();
            let id = unique_event_id("fresh");
            let answer = store
                .claim(Claimant::new(&id, TYPE, &ClaimToken::generate()), LEASE)
                .await;
            (answer, started.elapsed())
        });
    }
    let mut slowest = Duration::ZERO;
    for (answer, waited) in fresh.join_all().await {
        assert_eq!(answer.expect("no fresh claim fails"), Claim::Acquired);
        slowest = slowest.max(waited);
    }
    assert!(
        slowest < Duration::from_millis(1_000),
        "a fresh claim waited {slowest:?}"
    );
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    handler.rollback().await.unwrap();
    // The redelivery itself waits as it would alone: the store's lock timeout, then 503.
    let (answer, waited) = redelivery.await.unwrap();
    assert!(answer.is_err(), "{answer:?} after {waited:?}");
    assert!(waited >= Duration::from_secs(2), "it waited {waited:?}");
    eprintln!("the slowest of 40 fresh claims beside a held row: {slowest:?}");
}

/// An event whose row a handler's transaction holds, and the token that holds the event.
struct Held {
    event_id: String,
    token: ClaimToken,
}

impl Held {
    fn claimant(&self) -> Claimant<'_> {
        Claimant::new(&self.event_id, TYPE, &self.token)
    }
}

/// PostgreSQL's group commit with one writer: a write held up in its turn holds up every
/// write after it.
const ONE_WRITER: GroupCommit = GroupCommit::POSTGRES.with_writers(1);

/// A write of an event whose row a handler's transaction holds (after its own `complete_in`,
/// say) waits for the row on a connection of its own: with PostgreSQL's group commit on (one
/// writer, so that any write it waited behind would be held up), fresh claims and receipts are
/// answered at once meanwhile. The event is received and taken by a worker (`inbox`), or
/// claimed by a delivery; `write` is the write that waits.
async fn a_held_row_holds_up_no_grouped_write<F, Fut>(label: &str, inbox: bool, write: F)
where
    F: FnOnce(sangho_webhook_sqlx::PostgresStore, Held) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let test_store = postgres_store_grouped_by(label, 16, ONE_WRITER).await;
    let store = test_store.store.clone();
    let held = Held {
        event_id: unique_event_id("held"),
        token: ClaimToken::generate(),
    };
    if inbox {
        let received = ReceivedEvent::new(&held.event_id, TYPE, &BODY, &[], "/webhooks");
        assert_eq!(store.receive(&received).await.unwrap(), Receipt::Stored);
        let taken = store.take(&held.token, LEASE, TakeOrder::FreshFirst).await;
        assert!(taken.unwrap().is_some(), "the event is due");
    } else {
        let claim = store.claim(held.claimant(), LEASE).await;
        assert_eq!(claim.unwrap(), Claim::Acquired);
    }
    let handler = postgres_row_held(&store, &held.event_id).await;
    let waiting = tokio::spawn(write(store.clone(), held));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut fresh = JoinSet::new();
    for n in 0..20 {
        let store = store.clone();
        fresh.spawn(async move {
            let started = tokio::time::Instant::now();
            let id = unique_event_id("fresh");
            if n % 2 == 0 {
                let token = ClaimToken::generate();
                let claimant = Claimant::new(&id, TYPE, &token);
                assert_eq!(store.claim(claimant, LEASE).await.unwrap(), Claim::Acquired);
            } else {
                let event = ReceivedEvent::new(&id, TYPE, &BODY, &[], "/webhooks");
                assert_eq!(store.receive(&event).await.unwrap(), Receipt::Stored);
            }
            started.elapsed()
        });
    }
    let answered = tokio::time::timeout(Duration::from_secs(3), fresh.join_all()).await;
    let waited = answered.expect("fresh writes are answered while the held row's write waits");
    let slowest = waited.into_iter().max().unwrap_or_default();
    assert!(
        slowest < Duration::from_millis(1_000),
        "a fresh write waited {slowest:?}"
    );
    assert!(!waiting.is_finished(), "the held row's write waits for it");
    handler.rollback().await.unwrap();
    waiting.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_worker_completion_of_a_held_row_holds_up_no_grouped_write_on_postgres() {
    a_held_row_holds_up_no_grouped_write("group_held_done", true, |store, held| async move {
        let completion = Inbox::complete(&store, &held.claimant(), LEASE).await;
        assert_eq!(completion.unwrap(), Completion::Recorded);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_worker_renewal_of_a_held_row_holds_up_no_grouped_write_on_postgres() {
    a_held_row_holds_up_no_grouped_write("group_held_renew", true, |store, held| async move {
        let renewal = Inbox::renew(&store, &held.claimant(), LEASE).await;
        assert_eq!(renewal.unwrap(), Renewal::Held);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_worker_failure_of_a_held_row_holds_up_no_grouped_write_on_postgres() {
    a_held_row_holds_up_no_grouped_write("group_held_fail", true, |store, held| async move {
        let attempt = FailedAttempt::new("status 500", NextAttempt::After(LEASE));
        let failed = Inbox::fail(&store, &held.claimant(), &attempt).await;
        assert_eq!(failed.unwrap(), Failure::Recorded);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_redelivery_of_a_held_row_holds_up_no_grouped_write_on_postgres() {
    a_held_row_holds_up_no_grouped_write("group_held_again", true, |store, held| async move {
        let again = ReceivedEvent::new(&held.event_id, TYPE, &BODY, &[], "/webhooks");
        assert_eq!(store.receive(&again).await.unwrap(), Receipt::Duplicate);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_completion_of_a_held_row_holds_up_no_grouped_write_on_postgres() {
    a_held_row_holds_up_no_grouped_write("group_held_complete", false, |store, held| async move {
        let retention = Duration::from_secs(3600);
        let completion = IdempotencyStore::complete(&store, held.claimant(), retention).await;
        assert_eq!(completion.unwrap(), Completion::Recorded);
    })
    .await;
}

/// Nine completions in one group, one of a row a handler's transaction holds: the group waits
/// for that row no longer than its bound (100 ms, set as its transaction begins), then each
/// completion runs again alone, and only the held one waits for the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_group_of_completions_waits_for_a_held_row_no_longer_than_its_bound_on_postgres() {
    let test_store = postgres_store_grouped_by("group_held_many", 16, ONE_WRITER).await;
    let store = test_store.store.clone();
    let retention = Duration::from_secs(3600);
    let claim = |id: String, token: ClaimToken| {
        let store = store.clone();
        async move { store.claim(Claimant::new(&id, TYPE, &token), LEASE).await }
    };
    let mut claimed = Vec::new();
    for _ in 0..11 {
        let (id, token) = (unique_event_id("held_many"), ClaimToken::generate());
        assert_eq!(claim(id.clone(), token).await.unwrap(), Claim::Acquired);
        claimed.push((id, token));
    }
    // The lane's turn is held up by a redelivery's claim of another held row (its statement's
    // own bound). Meanwhile the writer takes a first completion alone, and waits with it for
    // the turn, while the nine queue behind it: its next group.
    let (blocker, _) = claimed.pop().expect("eleven claimed");
    let (first, first_token) = claimed.pop().expect("ten claimed");
    let blocker_holder = postgres_row_held(&store, &blocker).await;
    let held = claimed[0].0.clone();
    let handler = postgres_row_held(&store, &held).await;
    let blocked = tokio::spawn(claim(blocker, ClaimToken::generate()));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut completions = JoinSet::new();
    for (n, (id, token)) in [(first, first_token)]
        .into_iter()
        .chain(claimed.clone())
        .enumerate()
    {
        if n == 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let store = store.clone();
        completions.spawn(async move {
            let started = tokio::time::Instant::now();
            let claimant = Claimant::new(&id, TYPE, &token);
            let answer = IdempotencyStore::complete(&store, claimant, retention).await;
            (id, answer, started.elapsed())
        });
    }
    for _ in 0..claimed.len() {
        let next = tokio::time::timeout(Duration::from_secs(5), completions.join_next()).await;
        let (id, answer, waited) = next.expect("answered").expect("a completion").unwrap();
        assert_ne!(id, held, "the held row's completion waits for the row");
        assert_eq!(
            answer.unwrap(),
            Completion::Recorded,
            "the completion of {id}"
        );
        assert!(
            waited < Duration::from_millis(1_000),
            "the completion of {id} waited {waited:?} behind the held row"
        );
    }
    handler.rollback().await.unwrap();
    let (id, answer, _) = completions
        .join_next()
        .await
        .expect("the held one")
        .unwrap();
    assert_eq!((id, answer.unwrap()), (held, Completion::Recorded));
    blocker_holder.rollback().await.unwrap();
    assert_eq!(blocked.await.unwrap().unwrap(), Claim::InFlight);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn claims_completions_and_receipts_of_many_events_in_one_group_on_postgres() {
    let test_store = postgres_store_grouped_by("group_many", 16, ONE_WRITER).await;
    let store = test_store.store.clone();
    let retention = Duration::from_secs(3600);
    let acquire = |id: &str, token: &ClaimToken| {
        let store = store.clone();
        let (id, token) = (id.to_owned(), *token);
        async move {
            store
                .claim(Claimant::new(&id, TYPE, &token), LEASE)
                .await
                .unwrap()
        }
    };
    // Before the group: one event completed, two in flight under another delivery's claim,
    // five held by the deliveries that complete them in the group, one received.
    let (completed, in_flight) = a_completed_and_an_in_flight_event(&store).await;
    let others = unique_event_id("others");
    assert_eq!(
        acquire(&others, &ClaimToken::generate()).await,
        Claim::Acquired
    );
    let mut held = Vec::new();
    for _ in 0..5 {
        let (id, token) = (unique_event_id("held"), ClaimToken::generate());
        assert_eq!(acquire(&id, &token).await, Claim::Acquired);
        held.push((id, token));
    }
    let known = a_stored_event(&store).await;
    // Four events taken by workers, which complete them in the group.
    let mut taken = Vec::new();
    for _ in 0..3 {
        let id = unique_event_id("taken");
        let event = ReceivedEvent::new(&id, TYPE, &BODY, &[], "/");
        assert_eq!(store.receive(&event).await.unwrap(), Receipt::Stored);
    }
    for _ in 0..4 {
        let token = ClaimToken::generate();
        let event = store
            .take(&token, LEASE, TakeOrder::FreshFirst)
            .await
            .unwrap();
        taken.push((event.expect("an event is due").event_id, token));
    }
    // The writer is held up by a claim of a row a handler's transaction holds (the group's
    // lock timeout), while the group queues behind it.
    let (blocker, owner) = (unique_event_id("blocker"), ClaimToken::generate());
    assert_eq!(acquire(&blocker, &owner).await, Claim::Acquired);
    let handler = postgres_row_held(&store, &blocker).await;
    let blocked = tokio::spawn(acquire(&blocker, &ClaimToken::generate()));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let fresh: Vec<String> = (0..12).map(|_| unique_event_id("fresh")).collect();
    let claims = spawn_claims_of(&store, fresh.iter().chain([&completed, &in_flight]));
    let mut completions = JoinSet::new();
    for (id, token) in held
        .iter()
        .cloned()
        .chain([(others.clone(), ClaimToken::generate())])
    {
        let store = store.clone();
        completions.spawn(async move {
            let claimant = Claimant::new(&id, TYPE, &token);
            (
                id.clone(),
                IdempotencyStore::complete(&store, claimant, retention).await,
            )
        });
    }
    let mut receipts = JoinSet::new();
    let received: Vec<String> = (0..6).map(|_| unique_event_id("received")).collect();
    for id in received.iter().chain([&known]) {
        spawn_receipt(&mut receipts, &store, id, None);
    }
    let mut worker_completions = JoinSet::new();
    for (id, token) in taken.clone() {
        let store = store.clone();
        worker_completions.spawn(async move {
            let claimant = Claimant::new(&id, TYPE, &token);
            Inbox::complete(&store, &claimant, retention).await
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    handler.rollback().await.unwrap();
    assert_eq!(blocked.await.unwrap(), Claim::InFlight);
    for completion in worker_completions.join_all().await {
        assert_eq!(completion.unwrap(), Completion::Recorded);
    }
    for (id, _) in &taken {
        let record = store.show(id).await.unwrap().expect("the event is stored");
        assert_eq!(
            record.summary.state,
            EventState::Completed,
            "the state of {id}"
        );
    }
    each_claim_answers_as_alone(claims, &completed, &in_flight).await;
    for (id, answer) in completions.join_all().await {
        let expected = match id {
            _ if id == others => Completion::TakenOver,
            _ => Completion::Recorded,
        };
        assert_eq!(answer.unwrap(), expected, "the completion of {id}");
    }
    each_receipt_answers_as_alone(receipts, &known).await;
    for (id, _) in &held {
        assert_eq!(acquire(id, &ClaimToken::generate()).await, Claim::Completed);
    }
    for id in &fresh {
        assert_eq!(acquire(id, &ClaimToken::generate()).await, Claim::InFlight);
    }
}

/// Eight events claimed at once, then completed at once: on a grouped store, a group of
/// claims and a group of completions (`claim_many.sql`, `complete_many.sql`).
async fn claim_and_complete_eight(store: &sangho_webhook_sqlx::PostgresStore) {
    let ids: Vec<(String, ClaimToken)> = (0..8)
        .map(|_| (unique_event_id("grow"), ClaimToken::generate()))
        .collect();
    let mut claims = JoinSet::new();
    for (id, token) in ids.clone() {
        let store = store.clone();
        claims.spawn(async move {
            IdempotencyStore::claim(&store, Claimant::new(&id, TYPE, &token), LEASE).await
        });
    }
    for claimed in claims.join_all().await {
        assert_eq!(claimed.unwrap(), Claim::Acquired);
    }
    let mut completions = JoinSet::new();
    for (id, token) in ids {
        let store = store.clone();
        completions.spawn(async move {
            let claimant = Claimant::new(&id, TYPE, &token);
            IdempotencyStore::complete(&store, claimant, Duration::from_secs(3600)).await
        });
    }
    for completed in completions.join_all().await {
        assert_eq!(completed.unwrap(), Completion::Recorded);
    }
}

/// A table that grows after the group commit's statements settled on a plan while it was
/// nearly empty: within 100 groups the claims and completions read it by its indexes again,
/// and no group scans it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn the_groups_read_a_table_that_grew_by_its_indexes_on_postgres() {
    let connections = 2;
    let test_store = postgres_store_grouped_by("group_grown", connections, ONE_WRITER).await;
    let store = test_store.store.clone();
    let table = store.table().as_str().to_owned();
    // Past the five runs after which a prepared statement keeps a generic plan, for each size
    // of group these rounds make.
    let scans = common::postgres_scans_once_grown(store.pool(), connections, &table, 24, || {
        claim_and_complete_eight(&store)
    })
    .await;
    assert_eq!(
        scans, 0,
        "16 groups of claims and of completions scanned the table {scans} times"
    );
}

/// PostgreSQL's group commit (`GroupCommit::POSTGRES`, two writers) against both conformance
/// suites, unchanged: the store's answers with grouping on are the ungrouped store's.
mod grouped_postgres {
    mod claims {
        use crate::common::grouped_postgres_store;

        sangho_webhook::idempotency_store_conformance!(
            #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
            => async { grouped_postgres_store("gconf", 16).await.under_test() }
        );
    }

    mod inbox {
        use crate::common::grouped_postgres_store;

        sangho_webhook::inbox_conformance!(
            #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
            => async { grouped_postgres_store("ginbox", 16).await.inbox_under_test() }
        );
    }
}
