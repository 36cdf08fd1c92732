//! Inbox mode's wake-up within one process: each stored event wakes one waiting worker, not
//! every one, so that a group of receipts does not send every idle worker to a take that finds
//! nothing; and an event stored while no worker waits wakes the next that does. SQLite needs no
//! server; the MariaDB checks (feature `mariadb`) are ignored by default (run with
//! `-- --include-ignored` and SANGHO_TEST_MYSQL_URL). PostgreSQL's waiting workers are woken
//! by its `LISTEN` as well, which tells each of them of every notification, its own process's
//! included.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use sangho_webhook::{inbox::Inbox, testing::inbox_conformance::stored};
use tokio::time::Instant;

/// The longest a worker waits for events in these checks: far longer than a wake-up takes.
const AT_MOST: Duration = Duration::from_secs(10);

/// Long enough for a waiting worker to be waiting, or for a woken one to return.
const SETTLE: Duration = Duration::from_millis(300);

/// Eight workers wait; one stored event wakes one of them, seven more wake the other seven.
async fn each_stored_event_wakes_one_waiting_worker(inbox: Arc<dyn Inbox>) {
    let woken = Arc::new(AtomicUsize::new(0));
    let mut waiting = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (inbox, woken) = (inbox.clone(), woken.clone());
        waiting.spawn(async move {
            let started = Instant::now();
            inbox.wait_for_events(AT_MOST).await;
            assert!(
                started.elapsed() < AT_MOST,
                "a worker waited until its poll"
            );
            woken.fetch_add(1, Ordering::SeqCst);
        });
    }
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        woken.load(Ordering::SeqCst),
        0,
        "a worker woke before any event was stored"
    );

    stored(&*inbox, "wake_one").await;
    // However slow the machine, the first wakes; then the others have time to wake too.
    tokio::time::timeout(AT_MOST / 2, async {
        while woken.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("one stored event woke none of 8 waiting workers");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        woken.load(Ordering::SeqCst),
        1,
        "one stored event woke this many of 8 waiting workers"
    );

    for _ in 0..7 {
        stored(&*inbox, "wake_rest").await;
    }
    let woke_all = tokio::time::timeout(AT_MOST / 2, async {
        while let Some(done) = waiting.join_next().await {
            done.expect("a waiting worker");
        }
    })
    .await;
    assert!(
        woke_all.is_ok(),
        "8 stored events woke {} of 8 waiting workers",
        woken.load(Ordering::SeqCst)
    );
}

/// An event stored while no worker waits: the next worker that waits returns at once.
async fn an_event_stored_while_no_worker_waits_wakes_the_next_that_does(inbox: Arc<dyn Inbox>) {
    stored(&*inbox, "wake_later").await;
    let started = Instant::now();
    inbox.wait_for_events(AT_MOST).await;
    assert!(
        started.elapsed() < AT_MOST / 10,
        "the worker waited {:?} for an event stored before it waited",
        started.elapsed()
    );
}

#[tokio::test]
async fn each_stored_event_wakes_one_waiting_worker_on_sqlite() {
    let store = common::sqlite_store(8).await;
    each_stored_event_wakes_one_waiting_worker(Arc::new(store.store.clone())).await;
}

#[tokio::test]
async fn an_event_stored_while_no_worker_waits_wakes_the_next_that_does_on_sqlite() {
    let store = common::sqlite_store(8).await;
    an_event_stored_while_no_worker_waits_wakes_the_next_that_does(Arc::new(store.store.clone()))
        .await;
}

#[tokio::test]
#[cfg(feature = "mariadb")]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn each_stored_event_wakes_one_waiting_worker_on_mariadb() {
    let store = common::mariadb_store("wake_one", 4).await;
    each_stored_event_wakes_one_waiting_worker(Arc::new(store.store.clone())).await;
}

#[tokio::test]
#[cfg(feature = "mariadb")]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn an_event_stored_while_no_worker_waits_wakes_the_next_that_does_on_mariadb() {
    let store = common::mariadb_store("wake_later", 4).await;
    an_event_stored_while_no_worker_waits_wakes_the_next_that_does(Arc::new(store.store.clone()))
        .await;
}
