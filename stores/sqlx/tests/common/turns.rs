//! The inbox workers' takes and completions served together: in turns (PostgreSQL, MariaDB),
//! or in one group commit (SQLite). Test bodies each dialect's file calls from a
//! `#[tokio::test]` of its own (with its `#[ignore]` where it needs a server). Each takes a
//! store whose pool has the connections its comment asks for.

use std::time::Duration;

use bytes::Bytes;
use sangho_webhook::{
    inbox::{Inbox, Receipt, ReceivedEvent, TakeOrder, TakenEvent},
    store::{ClaimToken, Claimant, Completion},
    testing::conformance::unique_event_id,
};
use sangho_webhook_sqlx::sqlx::{AssertSqlSafe, Database, Executor, Transaction};

use super::{LONG, TYPE, bodies::TestDatabase};

/// A store whose workers take and complete in turns.
pub trait TurnStore: TestDatabase + Inbox + Clone + 'static {}

impl<S: TestDatabase + Inbox + Clone + 'static> TurnStore for S {}

/// Receives `id` with the ordering key `key` (a small body, its path).
async fn receive(store: &impl Inbox, id: &str, key: Option<&str>) -> Receipt {
    let body = Bytes::from(format!(r#"{{"id":"{id}"}}"#));
    let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    let event = ReceivedEvent::new(id, TYPE, &body, &headers, "/webhooks").with_ordering_key(key);
    store.receive(&event).await.expect("receive")
}

/// Takes the next due event, new events first, for a long lease.
async fn take(store: &impl Inbox) -> Option<TakenEvent> {
    store
        .take(&ClaimToken::generate(), LONG, TakeOrder::FreshFirst)
        .await
        .expect("take")
}

/// Takes that wait at once are served together, in one turn (the store's take queue): a turn
/// hands each waiting worker at most one event, under that worker's own token, and never two
/// events of one ordering key. `store` has one connection.
pub async fn takes_served_together_never_take_two_events_of_one_key<S: TurnStore>(store: &S) {
    let (key, other_key) = (unique_event_id("key"), unique_event_id("key"));
    let keyed: Vec<String> = (0..3).map(|_| unique_event_id("keyed")).collect();
    let other = unique_event_id("other");
    let plain: Vec<String> = (0..3).map(|_| unique_event_id("plain")).collect();
    // Received interleaved, so that one search of the turn passes over the key's later events.
    for n in 0..3 {
        receive(store, &plain[n], None).await;
        receive(store, &keyed[n], Some(&key)).await;
        if n == 0 {
            receive(store, &other, Some(&other_key)).await;
        }
    }

    // The pool's only connection held: every take waits, and they all go in one turn.
    let held = store.pool().acquire().await.unwrap();
    let mut takes = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let store = store.clone();
        takes.spawn(async move {
            let token = ClaimToken::generate();
            let taken = store.take(&token, LONG, TakeOrder::FreshFirst).await;
            (token, taken.expect("take"))
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(held);
    let mut taken_ids = Vec::new();
    let mut taken_events = Vec::new();
    for (token, taken) in takes.join_all().await {
        if let Some(taken) = taken {
            assert_eq!(
                taken.token, token,
                "each event under its own worker's token"
            );
            assert_eq!(taken.attempt, 1);
            taken_ids.push(taken.event_id.clone());
            taken_events.push(taken);
        }
    }
    taken_ids.sort();
    let mut expected = vec![keyed[0].clone(), other.clone()];
    expected.extend(plain.iter().cloned());
    expected.sort();
    assert_eq!(
        taken_ids, expected,
        "one event of each key, every event without one"
    );
    assert!(take(store).await.is_none(), "the key's later events wait");
    // Each event is held by the token its worker was answered with: its completion records it.
    for event in taken_events {
        let completed = Inbox::complete(store, &event.claimant(), LONG).await;
        assert_eq!(
            completed.expect("complete"),
            Completion::Recorded,
            "{} completed by its worker's token",
            event.event_id
        );
    }
}

/// A take whose caller gives up while it waits for its turn (here: the turn before it waits
/// for the pool's only connection) is never served: its event stays due for the next take.
/// `store` has one connection.
pub async fn a_take_given_up_while_it_waits_for_its_turn_takes_nothing<S: TurnStore>(store: &S) {
    let (first, second) = (unique_event_id("first"), unique_event_id("second"));
    receive(store, &first, None).await;
    receive(store, &second, None).await;

    let held = store.pool().acquire().await.unwrap();
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { take(&store).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let given_up = tokio::time::timeout(Duration::from_millis(200), take(store)).await;
    assert!(
        given_up.is_err(),
        "the take waits for its turn: {given_up:?}"
    );
    drop(held);

    let taken = waiting.await.unwrap().expect("the first take's event");
    assert_eq!(taken.event_id, first);
    let next = take(store).await.expect("the second event is still due");
    assert_eq!(next.event_id, second);
    assert_eq!(next.attempt, 1, "never taken by the take that gave up");
}

/// Completions that wait at once are served together: each is answered for its own token, as
/// alone (a completion by a token that does not hold its event, in the same turn as its
/// holder's, is refused and changes nothing). `store` has one connection.
pub async fn completions_served_together_each_answer_for_their_own_token<S: TurnStore>(store: &S) {
    let mut taken = Vec::new();
    for _ in 0..6 {
        receive(store, &unique_event_id("complete"), None).await;
        taken.push(take(store).await.expect("a due event"));
    }
    let stranger = ClaimToken::generate();

    // The pool's only connection held, the first completion's turn waits for it, and every
    // completion after it waits for the next turn: they all go in that one.
    let held = store.pool().acquire().await.unwrap();
    let mut completions = tokio::task::JoinSet::new();
    let complete = |event: TakenEvent, token: ClaimToken, holder: bool| {
        let store = store.clone();
        async move {
            let claimant = Claimant::new(&event.event_id, TYPE, &token);
            let completed = Inbox::complete(&store, &claimant, LONG).await;
            (event.event_id.clone(), holder, completed.expect("complete"))
        }
    };
    let first_turn = taken.pop().unwrap();
    completions.spawn(complete(first_turn.clone(), first_turn.token, true));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for event in &taken {
        completions.spawn(complete(event.clone(), event.token, true));
    }
    completions.spawn(complete(taken[0].clone(), stranger, false));
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(held);
    for (event_id, holder, completion) in completions.join_all().await {
        let expected = match holder {
            true => Completion::Recorded,
            false => Completion::TakenOver,
        };
        assert_eq!(completion, expected, "{event_id}, by its holder: {holder}");
    }
    assert_eq!(store.stats().await.unwrap().completed, 6);
    let again = Inbox::complete(store, &taken[0].claimant(), LONG)
        .await
        .unwrap();
    assert_eq!(
        again,
        Completion::Recorded,
        "a repeated completion succeeds"
    );
}

/// `events` received and taken, and a transaction (on a connection of the store's pool) that
/// holds the first one's row (`SELECT … FOR UPDATE`), as a handler's own transaction may; the
/// row is free once the transaction is dropped.
async fn taken_with_first_row_held<S: TurnStore>(
    store: &S,
    events: usize,
) -> (Vec<TakenEvent>, Transaction<'static, S::Db>)
where
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
{
    let mut taken = Vec::new();
    for _ in 0..events {
        receive(store, &unique_event_id("held"), None).await;
        taken.push(take(store).await.expect("a due event"));
    }
    let mut holder = store.pool().begin().await.unwrap();
    // The id is the test's own (letters, digits and `_`).
    let lock = format!(
        "SELECT event_id FROM {} WHERE event_id = '{}' FOR UPDATE",
        store.table().as_str(),
        taken[0].event_id
    );
    let locked = (&mut *holder).execute(AssertSqlSafe(lock)).await.unwrap();
    drop(locked);
    (taken, holder)
}

/// A turn of completions never waits for a row that another transaction holds (a handler's
/// own, still open): the turn's other completions are answered at once, and the held one
/// completes once the row is free, as it would alone. `store` has four connections.
pub async fn a_row_held_by_another_transaction_holds_up_no_other_completion_of_its_turn<
    S: TurnStore,
>(
    store: &S,
) where
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
{
    let (mut taken, holder) = taken_with_first_row_held(store, 6).await;
    let held_event = taken[0].clone();

    // The held event's completion first: the turns after it hold the others.
    let held = {
        let (store, event) = (store.clone(), held_event.clone());
        tokio::spawn(async move { Inbox::complete(&store, &event.claimant(), LONG).await })
    };
    let mut others = tokio::task::JoinSet::new();
    for event in taken.split_off(1) {
        let store = store.clone();
        others.spawn(async move { Inbox::complete(&store, &event.claimant(), LONG).await });
    }
    let answered = tokio::time::timeout(Duration::from_secs(3), others.join_all()).await;
    let answered = answered.expect("the other completions are answered while the row is held");
    for completion in answered {
        assert_eq!(completion.unwrap(), Completion::Recorded);
    }
    assert!(
        !held.is_finished(),
        "the held event's completion waits for its row"
    );

    holder.rollback().await.unwrap();
    let completion = held.await.unwrap().unwrap();
    assert_eq!(completion, Completion::Recorded);
    assert_eq!(store.stats().await.unwrap().completed, 6);
}

/// A lone completion whose row another transaction holds never holds up the turns after it:
/// the completions that come meanwhile are answered at once. `store` has four connections.
pub async fn a_lone_completion_of_a_held_row_holds_up_no_later_turn<S: TurnStore>(store: &S)
where
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
{
    let (taken, holder) = taken_with_first_row_held(store, 4).await;
    let held_event = taken[0].clone();

    let held = {
        let (store, event) = (store.clone(), held_event.clone());
        tokio::spawn(async move { Inbox::complete(&store, &event.claimant(), LONG).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for event in &taken[1..] {
        let completion = tokio::time::timeout(
            Duration::from_secs(3),
            Inbox::complete(store, &event.claimant(), LONG),
        )
        .await
        .expect("answered while the other row is held");
        assert_eq!(completion.unwrap(), Completion::Recorded);
    }
    assert!(
        !held.is_finished(),
        "the held event's completion waits for its row"
    );

    holder.rollback().await.unwrap();
    assert_eq!(held.await.unwrap().unwrap(), Completion::Recorded);
}
