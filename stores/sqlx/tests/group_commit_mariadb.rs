//! MariaDB's group commit (of inbox receipts by default; of every write opt-in,
//! `GroupCommit::MARIADB`; ignored by default: run with
//! `--include-ignored`, URL from `SANGHO_TEST_MYSQL_URL`): the claims and completions waiting
//! together are written in one transaction (`claim_many.sql`, `complete_many.sql`), each
//! caller gets the answer its own statement gives, and a row held by a handler's transaction
//! holds up no other write of the group it lands in. Inbox receipts without an ordering key are
//! written in one statement too (`inbox_receive_many.sql`, their sequence numbers drawn first by
//! `inbox_receive_numbers.sql`).

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{mariadb_row_held, mariadb_store};
use sangho_webhook::{
    inbox::{Inbox, Receipt, ReceivedEvent},
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal},
    testing::conformance::unique_event_id,
};
use sangho_webhook_sqlx::{GroupCommit, MariaDbStore, sqlx};
use tokio::task::JoinSet;

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);
const TYPE: &str = "charge.succeeded";

async fn claim(store: &MariaDbStore, id: &str, token: &ClaimToken) -> Claim {
    store
        .claim(Claimant::new(id, TYPE, token), LEASE)
        .await
        .expect("no claim fails")
}

async fn complete(store: &MariaDbStore, id: &str, token: &ClaimToken) -> Completion {
    IdempotencyStore::complete(store, Claimant::new(id, TYPE, token), RETENTION)
        .await
        .expect("no completion fails")
}

/// The COMMIT statements the pool's one connection has run (a group's transaction ends in
/// one; a write in its own commit runs with autocommit, and ends in none).
async fn commits(store: &MariaDbStore) -> i64 {
    let status: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Com_commit'")
        .fetch_one(store.pool())
        .await
        .expect("the session's status");
    status.1.parse().expect("a count")
}

/// `MariaDbStore` writes each of today's mode's claims in its own commit by default, and
/// groups its other writes. Written at once over a pool of one connection, the claims end no
/// transaction; their completions, and inbox receipts, are committed in groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn by_default_claims_are_written_alone_and_other_writes_grouped_on_mariadb() {
    let test_store = mariadb_store("group_default", 1).await;
    let by_default = MariaDbStore::new(test_store.store.pool().clone()).group_commit();
    let store = test_store.store.clone().with_group_commit(by_default);
    let before = commits(&store).await;
    let mut deliveries = JoinSet::new();
    for _ in 0..32 {
        let store = store.clone();
        deliveries.spawn(async move {
            let (id, token) = (unique_event_id("claimed"), ClaimToken::generate());
            assert_eq!(claim(&store, &id, &token).await, Claim::Acquired);
            (id, token)
        });
    }
    let mut claimed = Vec::new();
    while let Some(delivered) = deliveries.join_next().await {
        claimed.push(delivered.expect("a delivery"));
    }
    let after_claims = commits(&store).await;
    assert_eq!(
        after_claims, before,
        "today's mode's claims were committed in groups"
    );

    let mut completions = JoinSet::new();
    for (id, token) in claimed {
        let store = store.clone();
        completions.spawn(async move { complete(&store, &id, &token).await });
    }
    while let Some(completed) = completions.join_next().await {
        assert_eq!(completed.expect("a completion"), Completion::Recorded);
    }
    let after_completions = commits(&store).await;
    assert!(
        after_completions > after_claims,
        "no completions were committed in a group"
    );

    let mut receipts = JoinSet::new();
    for _ in 0..32 {
        let store = store.clone();
        receipts.spawn(async move {
            let id = unique_event_id("received");
            let body = bytes::Bytes::from(format!(r#"{{"id":"{id}","type":"{TYPE}"}}"#));
            let event = ReceivedEvent::new(&id, TYPE, &body, &[], "/webhooks");
            store.receive(&event).await.expect("no receipt fails")
        });
    }
    while let Some(received) = receipts.join_next().await {
        assert_eq!(received.expect("a receipt"), Receipt::Stored);
    }
    assert!(
        commits(&store).await > after_completions,
        "no inbox receipts were committed in a group"
    );
}

/// Claims and completions of many events, sent at once to one writer: each answers as its
/// statement alone would (a fresh event acquired, a completed one completed, another
/// delivery's claim in flight; a completion by its owner recorded, by another token taken
/// over), and a claim and a completion of one id keep their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn claims_and_completions_of_many_events_in_groups_each_answer_as_alone_on_mariadb() {
    let test_store = mariadb_store("group_many", 16).await;
    let by_default = MariaDbStore::new(test_store.store.pool().clone());
    assert_eq!(
        by_default.group_commit(),
        GroupCommit::MARIADB.with_claims_alone(true),
        "every write but the claims grouped by default"
    );
    let store = test_store
        .store
        .clone()
        .with_group_commit(GroupCommit::MARIADB.with_writers(1));
    for round in 0..5 {
        let (completed, token) = (unique_event_id("completed"), ClaimToken::generate());
        assert_eq!(claim(&store, &completed, &token).await, Claim::Acquired);
        assert_eq!(
            complete(&store, &completed, &token).await,
            Completion::Recorded
        );
        let (in_flight, other) = (unique_event_id("in-flight"), ClaimToken::generate());
        assert_eq!(claim(&store, &in_flight, &other).await, Claim::Acquired);
        let mut held = Vec::new();
        for _ in 0..8 {
            let (id, token) = (unique_event_id("held"), ClaimToken::generate());
            assert_eq!(claim(&store, &id, &token).await, Claim::Acquired);
            held.push((id, token));
        }
        let fresh: Vec<String> = (0..24).map(|_| unique_event_id("fresh")).collect();
        let mut claims = JoinSet::new();
        for id in fresh.iter().chain([&completed, &in_flight, &fresh[0]]) {
            let (store, id) = (store.clone(), id.clone());
            claims.spawn(async move {
                let token = ClaimToken::generate();
                let answer = claim(&store, &id, &token).await;
                (id, answer)
            });
        }
        let mut completions = JoinSet::new();
        for (id, token) in held
            .iter()
            .cloned()
            .chain([(in_flight.clone(), ClaimToken::generate())])
        {
            let store = store.clone();
            completions.spawn(async move { (id.clone(), complete(&store, &id, &token).await) });
        }
        let mut first_fresh = 0;
        for (id, answer) in claims.join_all().await {
            let expected = match &id {
                id if *id == completed => Claim::Completed,
                id if *id == in_flight => Claim::InFlight,
                id if *id == fresh[0] => {
                    first_fresh += 1;
                    continue;
                }
                _ => Claim::Acquired,
            };
            assert_eq!(answer, expected, "round {round}: the claim of {id}");
        }
        assert_eq!(first_fresh, 2);
        for (id, answer) in completions.join_all().await {
            let expected = match id {
                _ if id == in_flight => Completion::TakenOver,
                _ => Completion::Recorded,
            };
            assert_eq!(answer, expected, "round {round}: the completion of {id}");
        }
        for (id, _) in &held {
            assert_eq!(
                claim(&store, id, &ClaimToken::generate()).await,
                Claim::Completed
            );
        }
    }
}

/// A body of `size` bytes holding every byte value, shifted by `shift`.
fn body_of(size: usize, shift: usize) -> bytes::Bytes {
    (0..size).map(|at| ((at + shift) % 256) as u8).collect()
}

/// Receipts of many events, sent at once to one writer (one statement of many rows, their
/// sequence numbers drawn first): each answers as its statement alone would. A fresh event is
/// stored (once, when it is sent twice in one group), an event already received or completed by
/// a delivery of the direct mode is a duplicate, one a delivery holds a live claim on is
/// claimed, and one whose claim ran out is stored; every stored body and its headers read back
/// byte for byte, bodies of 1 B to 64 KiB side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn receipts_of_many_events_in_groups_each_answer_as_alone_on_mariadb() {
    let test_store = mariadb_store("group_receipts", 16).await;
    let store = test_store
        .store
        .clone()
        .with_group_commit(GroupCommit::MARIADB.with_writers(1));
    let receive = |id: String, body: bytes::Bytes| {
        let store = store.clone();
        async move {
            let headers = vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("sangho-event-id".to_owned(), id.clone()),
            ];
            let event = ReceivedEvent::new(&id, TYPE, &body, &headers, "/webhooks/sangho");
            let receipt = store.receive(&event).await.expect("no receipt fails");
            (id, receipt)
        }
    };
    for round in 0..5 {
        let received = unique_event_id("received");
        let (_, first) = receive(received.clone(), body_of(10, 0)).await;
        assert_eq!(first, Receipt::Stored);
        let (completed, token) = (unique_event_id("completed"), ClaimToken::generate());
        assert_eq!(claim(&store, &completed, &token).await, Claim::Acquired);
        assert_eq!(
            complete(&store, &completed, &token).await,
            Completion::Recorded
        );
        let claimed = unique_event_id("claimed");
        let claimed_by = ClaimToken::generate();
        assert_eq!(claim(&store, &claimed, &claimed_by).await, Claim::Acquired);
        let ran_out = unique_event_id("ran-out");
        let lapsed = store
            .claim(
                Claimant::new(&ran_out, TYPE, &ClaimToken::generate()),
                Duration::from_millis(1),
            )
            .await;
        assert_eq!(lapsed.expect("no claim fails"), Claim::Acquired);
        tokio::time::sleep(Duration::from_millis(20)).await;

        let sizes = [1, 100, 2048, 65_536];
        let fresh: Vec<(String, bytes::Bytes)> = (0..24)
            .map(|n| (unique_event_id("fresh"), body_of(sizes[n % 4], n)))
            .collect();
        let others = [&received, &completed, &claimed, &ran_out]
            .map(|id| ((*id).clone(), body_of(100, round)));
        let mut receipts = JoinSet::new();
        for (id, body) in fresh.iter().chain(&others).chain([&fresh[0]]) {
            receipts.spawn(receive(id.clone(), body.clone()));
        }
        let mut first_fresh = Vec::new();
        for (id, receipt) in receipts.join_all().await {
            let expected = match &id {
                id if *id == received || *id == completed => Receipt::Duplicate,
                id if *id == claimed => Receipt::ClaimedByDelivery,
                id if *id == fresh[0].0 => {
                    first_fresh.push(receipt);
                    continue;
                }
                _ => Receipt::Stored,
            };
            assert_eq!(receipt, expected, "round {round}: the receipt of {id}");
        }
        first_fresh.sort_by_key(|receipt| *receipt == Receipt::Duplicate);
        assert_eq!(first_fresh, [Receipt::Stored, Receipt::Duplicate]);
        for (id, body) in fresh.iter().chain([&others[3]]) {
            let stored = store.show(id).await.expect("no read fails");
            let stored = stored.unwrap_or_else(|| panic!("round {round}: {id} is stored"));
            assert_eq!(stored.body, *body, "round {round}: the body of {id}");
            assert_eq!(
                stored.headers,
                [
                    ("content-type".to_owned(), "application/json".to_owned()),
                    ("sangho-event-id".to_owned(), id.clone()),
                ],
                "round {round}: the headers of {id}"
            );
        }
    }
}

/// How the write of a held row is sent beside the fresh claims.
#[derive(Clone, Copy)]
enum Sent {
    /// Alone, before them: its caller, or the writer, writes it alone (one round).
    First,
    /// Between two bursts of them, so that it lands in a group with them (three rounds).
    AmidABurst,
}

/// A fresh event's claim, sent after `delay`: how long it took to be answered `Acquired`.
async fn fresh_claim(store: MariaDbStore, delay: Duration) -> Duration {
    tokio::time::sleep(delay).await;
    let started = tokio::time::Instant::now();
    let id = unique_event_id("fresh");
    assert_eq!(
        claim(&store, &id, &ClaimToken::generate()).await,
        Claim::Acquired
    );
    started.elapsed()
}

/// A write of an event claimed by a delivery whose row a handler's transaction holds waits
/// for the row alone: with one writer (any write it waited behind would be held up), 20
/// fresh claims sent beside it (`sent`) are each answered within 2.5 s, none fails, and the
/// held row's write is still waiting. `write` is that write, by the event's owner; it
/// finishes once the row is free. The store's lock timeout is 10 s, so that a write held up
/// behind the held row's would wait far longer than a busy machine delays one (1.7 s seen in
/// CI beside the test that starts a private server).
async fn a_held_row_holds_up_no_grouped_write<F, Fut>(label: &str, sent: Sent, write: F)
where
    F: Fn(MariaDbStore, String, ClaimToken) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let test_store = mariadb_store(label, 16).await;
    let store = test_store
        .store
        .clone()
        .with_lock_timeout(Duration::from_secs(10))
        .with_group_commit(GroupCommit::MARIADB.with_writers(1));
    let rounds = match sent {
        Sent::First => 1,
        Sent::AmidABurst => 3,
    };
    for round in 0..rounds {
        let (held, owner) = (unique_event_id("held"), ClaimToken::generate());
        assert_eq!(claim(&store, &held, &owner).await, Claim::Acquired);
        let handler = mariadb_row_held(&store, &held).await;
        let mut fresh = JoinSet::new();
        let waiting = match sent {
            Sent::First => {
                let waiting = tokio::spawn(write(store.clone(), held, owner));
                tokio::time::sleep(Duration::from_millis(300)).await;
                for n in 0..20 {
                    fresh.spawn(fresh_claim(store.clone(), Duration::from_millis(n * 5)));
                }
                waiting
            }
            Sent::AmidABurst => {
                for _ in 0..10 {
                    fresh.spawn(fresh_claim(store.clone(), Duration::ZERO));
                }
                let waiting = tokio::spawn(write(store.clone(), held, owner));
                for _ in 0..10 {
                    fresh.spawn(fresh_claim(store.clone(), Duration::ZERO));
                }
                waiting
            }
        };
        let answered = tokio::time::timeout(Duration::from_secs(5), fresh.join_all()).await;
        let waited = answered.expect("fresh claims are answered while the held row's write waits");
        let slowest = waited.into_iter().max().unwrap_or_default();
        assert!(
            slowest < Duration::from_millis(2_500),
            "round {round}: a fresh claim waited {slowest:?}"
        );
        assert!(!waiting.is_finished(), "the held row's write waits for it");
        handler.rollback().await.unwrap();
        waiting.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_completion_of_a_held_row_holds_up_no_grouped_write_on_mariadb() {
    a_held_row_holds_up_no_grouped_write(
        "group_held_done",
        Sent::First,
        |store, id, token| async move {
            assert_eq!(complete(&store, &id, &token).await, Completion::Recorded);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_renewal_of_a_held_row_holds_up_no_grouped_write_on_mariadb() {
    a_held_row_holds_up_no_grouped_write(
        "group_held_renew",
        Sent::First,
        |store, id, token| async move {
            let renewal =
                IdempotencyStore::renew(&store, Claimant::new(&id, TYPE, &token), LEASE).await;
            assert_eq!(renewal.unwrap(), Renewal::Held);
        },
    )
    .await;
}

/// A redelivery's claim of a row a handler's transaction holds waits for the row alone (under
/// the store's lock timeout, 2 s), and answers once it is free: the event is in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_redelivery_of_a_held_row_holds_up_no_grouped_write_on_mariadb() {
    a_held_row_holds_up_no_grouped_write(
        "group_held_again",
        Sent::First,
        |store, id, _| async move {
            let started = tokio::time::Instant::now();
            let again = claim(&store, &id, &ClaimToken::generate()).await;
            assert_eq!(again, Claim::InFlight);
            let waited = started.elapsed();
            assert!(waited >= Duration::from_millis(300), "it waited {waited:?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_completion_of_a_held_row_in_a_group_holds_up_no_other_write_on_mariadb() {
    a_held_row_holds_up_no_grouped_write(
        "group_held_burst",
        Sent::AmidABurst,
        |store, id, token| async move {
            assert_eq!(complete(&store, &id, &token).await, Completion::Recorded);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_release_of_a_held_row_in_a_group_holds_up_no_other_write_on_mariadb() {
    a_held_row_holds_up_no_grouped_write(
        "group_held_release",
        Sent::AmidABurst,
        |store, id, token| async move {
            let released = store.release(Claimant::new(&id, TYPE, &token)).await;
            assert_eq!(released.unwrap(), Release::Released);
        },
    )
    .await;
}

/// A redelivered inbox receipt of an event whose row a handler's transaction holds (a
/// delivery of today's mode claimed it), sent amid the bursts: a receipt without an ordering
/// key is grouped too, and waits alone; once the row is free it answers that a delivery
/// holds the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_receipt_of_a_held_row_in_a_group_holds_up_no_other_write_on_mariadb() {
    a_held_row_holds_up_no_grouped_write(
        "group_held_receipt",
        Sent::AmidABurst,
        |store, id, _| async move {
            let body = bytes::Bytes::from_static(b"{}");
            let event = ReceivedEvent::new(&id, TYPE, &body, &[], "/webhooks");
            let receipt = store.receive(&event).await.expect("no receipt fails");
            assert_eq!(receipt, Receipt::ClaimedByDelivery);
        },
    )
    .await;
}

/// 64 deliveries at a time claim and complete fresh events through the grouped store of a
/// MariaDB server of the test's own, which is killed (SIGKILL) once 300 completions are
/// acknowledged, mid-group, and started again: every completion acknowledged before the crash
/// is a duplicate afterwards, and no acknowledged claim is lost (a redelivery never acquires
/// an event whose claim was answered `Acquired`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB's server binaries (mariadb-install-db, mariadbd): run with --include-ignored"]
async fn a_group_cut_by_a_crash_of_the_database_loses_nothing_acknowledged_on_mariadb() {
    use common::private_mariadb::PrivateMariaDb;
    use sqlx::mysql::MySqlPoolOptions;

    let server = PrivateMariaDb::start(&[]);
    let connect = || {
        MySqlPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy(&server.url())
            .unwrap()
    };
    let store = MariaDbStore::new(connect()).with_group_commit(GroupCommit::MARIADB);
    store.migrate().await.unwrap();
    // (event, token, the claim's answer, the completion's answer if it was acknowledged)
    let answers = Arc::new(Mutex::new(Vec::new()));
    let (completed, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut deliveries = JoinSet::new();
    for _ in 0..64 {
        let (store, answers) = (store.clone(), answers.clone());
        let (completed, failures) = (completed.clone(), failures.clone());
        deliveries.spawn(async move {
            loop {
                let (id, token) = (unique_event_id("crash"), ClaimToken::generate());
                let claimant = Claimant::new(&id, TYPE, &token);
                let Ok(claimed) = store.claim(claimant, LEASE).await else {
                    failures.fetch_add(1, Ordering::SeqCst);
                    return;
                };
                let done = IdempotencyStore::complete(&store, claimant, RETENTION).await;
                let acknowledged = done.as_ref().ok().copied();
                answers
                    .lock()
                    .unwrap()
                    .push((id, token, claimed, acknowledged));
                if acknowledged.is_none() {
                    failures.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                completed.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    while completed.load(Ordering::SeqCst) < 300 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.crash();
    deliveries.join_all().await;
    assert!(
        failures.load(Ordering::SeqCst) > 0,
        "the crash came while writes were under way"
    );
    server.start_again();
    let store = MariaDbStore::new(connect()).with_group_commit(GroupCommit::MARIADB);
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    let (mut duplicates, mut in_flight) = (0, 0);
    for (id, _, claimed, acknowledged) in &answers {
        assert_eq!(*claimed, Claim::Acquired, "a fresh event is acquired");
        let again = claim(&store, id, &ClaimToken::generate()).await;
        match acknowledged {
            Some(Completion::Recorded) => {
                assert_eq!(again, Claim::Completed, "the completion of {id} was kept");
                duplicates += 1;
            }
            _ => {
                assert_ne!(again, Claim::Acquired, "the claim of {id} was kept");
                in_flight += 1;
            }
        }
    }
    eprintln!(
        "MariaDB killed mid-group: {duplicates} acknowledged completions kept, {in_flight} \
         claims whose completion failed still held; {} writes failed with the crash",
        failures.load(Ordering::SeqCst)
    );
}

/// Two grouped stores (two app instances, a pool of 16 connections each) on one new table,
/// and the table's test store, which drops it with its last clone.
async fn two_grouped_instances(
    label: &str,
) -> (common::TestStore<MariaDbStore>, [MariaDbStore; 2]) {
    let first = mariadb_store(label, 16).await;
    let second = common::mariadb_store_on(first.store.table().as_str(), 16).await;
    let stores =
        [first.store.clone(), second].map(|store| store.with_group_commit(GroupCommit::MARIADB));
    (first, stores)
}

/// Two grouped stores (two app instances) on one table: 100 concurrent claims of one event,
/// alternating between them, acquire it exactly once, trial after trial.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn claims_of_one_event_through_two_grouped_instances_acquire_once_on_mariadb() {
    let (_table, stores) = two_grouped_instances("group_two").await;
    let trials = common::bodies::env_count("SANGHO_TRIALS", 200);
    for trial in 0..trials {
        let id = unique_event_id("two");
        let barrier = Arc::new(tokio::sync::Barrier::new(100));
        let mut claims = JoinSet::new();
        for n in 0..100 {
            let (store, id, barrier) = (stores[n % 2].clone(), id.clone(), barrier.clone());
            claims.spawn(async move {
                barrier.wait().await;
                let token = ClaimToken::generate();
                (n % 2, token, claim(&store, &id, &token).await)
            });
        }
        let answers = claims.join_all().await;
        let acquired: Vec<_> = answers
            .iter()
            .filter(|(_, _, answer)| *answer == Claim::Acquired)
            .collect();
        assert_eq!(acquired.len(), 1, "trial {trial}: {acquired:?}");
    }
}

/// The same, amid a stream of other events' claims and completions through both instances (16
/// tasks each), so that the claims of the trial's event wait in their writers' queues and are
/// written in groups, beside other events' claims in statements of many rows, instead of each
/// alone by its caller; the claims arrive over 40 ms, and the one that acquires completes the
/// event 20 ms later, as a handler's delivery would: exactly one claim acquires it, trial
/// after trial, and none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn claims_of_one_event_amid_others_through_two_grouped_instances_acquire_once_on_mariadb() {
    let (_table, stores) = two_grouped_instances("group_amid").await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut stream = JoinSet::new();
    for n in 0..32 {
        let (store, stop) = (stores[n % 2].clone(), stop.clone());
        stream.spawn(async move {
            let mut events = 0_u64;
            while !stop.load(Ordering::SeqCst) {
                let (id, token) = (unique_event_id("other"), ClaimToken::generate());
                assert_eq!(claim(&store, &id, &token).await, Claim::Acquired, "{id}");
                assert_eq!(complete(&store, &id, &token).await, Completion::Recorded);
                events += 1;
            }
            events
        });
    }
    let trials = common::bodies::env_count("SANGHO_TRIALS", 100);
    for trial in 0..trials {
        let id = unique_event_id("amid");
        let mut claims = JoinSet::new();
        for n in 0..40_u64 {
            let (store, id) = (stores[(n % 2) as usize].clone(), id.clone());
            claims.spawn(async move {
                tokio::time::sleep(Duration::from_millis(n)).await;
                let token = ClaimToken::generate();
                let answer = claim(&store, &id, &token).await;
                if answer == Claim::Acquired {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    assert_eq!(complete(&store, &id, &token).await, Completion::Recorded);
                }
                answer
            });
        }
        let answers = claims.join_all().await;
        let acquired = answers.iter().filter(|answer| **answer == Claim::Acquired);
        assert_eq!(acquired.count(), 1, "trial {trial}: {answers:?}");
    }
    stop.store(true, Ordering::SeqCst);
    let streamed: u64 = stream.join_all().await.into_iter().sum();
    eprintln!("{trials} trials, 0 doubles, beside {streamed} other events");
}
