//! Inbox mode's promise on PostgreSQL, under the fault: every receipt answered 2xx is durable.
//! 200 concurrent deliveries while the database (a server of the test's own, see
//! `common/private_postgres.rs`) crashes mid-burst (`pg_ctl stop -m immediate`): after the
//! restart every event answered 2xx is in the inbox, the sender redelivers the others until
//! they are, and the workers then handle each event exactly once.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx -- --include-ignored` on a
//! machine with PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`, or
//! `SANGHO_TEST_PG_BIN`).

mod common;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::private_postgres::PrivatePostgres;
use sangho_webhook::{
    SanghoEvent, WebhookBody,
    inbox::{Inbox, InboxReceiver, InboxWorker},
    testing::{Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_sqlx::{PostgresStore, sqlx::postgres::PgPoolOptions};

const DELIVERIES: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL's server binaries (initdb, pg_ctl): run with --include-ignored"]
async fn every_acknowledged_receipt_survives_a_crash_of_the_database() {
    let server = PrivatePostgres::start(&[]);
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&server.url())
        .await
        .unwrap();
    let store = PostgresStore::new(pool);
    store.migrate().await.unwrap();
    let receiver = InboxReceiver::builder(fixtures::secret(), store.clone())
        .with_clock(fixtures::fixed_clock)
        .with_store_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let delivery = |id: &str| {
        Delivery::event(id, fixtures::EVENT_TYPE)
            .signed(&fixtures::secret(), fixtures::NOW)
            .into_request()
    };

    let ids: Vec<String> = (0..DELIVERIES)
        .map(|_| unique_event_id("durable"))
        .collect();
    let answered = Arc::new(AtomicUsize::new(0));
    let mut burst = tokio::task::JoinSet::new();
    for id in ids.clone() {
        let (receiver, answered) = (receiver.clone(), answered.clone());
        let request = delivery(&id);
        burst.spawn(async move {
            let status = send(&receiver, request).await.status;
            answered.fetch_add(1, Ordering::SeqCst);
            (id, status)
        });
    }
    // The crash, mid-burst.
    while answered.load(Ordering::SeqCst) < DELIVERIES / 4 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.crash();
    let answers = burst.join_all().await;
    let acknowledged: Vec<&String> = answers
        .iter()
        .filter(|(_, status)| status.is_success())
        .map(|(id, _)| id)
        .collect();
    let refused = answers.len() - acknowledged.len();
    assert!(
        refused > 0,
        "the crash came mid-burst: some deliveries were refused"
    );
    for (_, status) in &answers {
        assert!(status.is_success() || status.as_u16() == 503, "{status}");
    }

    server.start_again();
    for id in &acknowledged {
        let stored = store.show(id).await.unwrap();
        assert!(
            stored.is_some(),
            "{id} was answered 2xx and lost in the crash"
        );
    }
    // The sender redelivers every refused event until it is acknowledged.
    let deadline = Instant::now() + Duration::from_secs(60);
    for (id, status) in &answers {
        if status.is_success() {
            continue;
        }
        while !send(&receiver, delivery(id)).await.status.is_success() {
            assert!(
                Instant::now() < deadline,
                "{id} never acknowledged after the restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let handled: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let handler = tower::service_fn({
        let handled = handled.clone();
        move |request: http::Request<WebhookBody>| {
            let id = request
                .extensions()
                .get::<SanghoEvent>()
                .unwrap()
                .id()
                .to_owned();
            *handled.lock().unwrap().entry(id).or_default() += 1;
            async {
                Ok::<_, std::convert::Infallible>(http::Response::new(WebhookBody::from_static(
                    b"ok",
                )))
            }
        }
    });
    let worker = InboxWorker::builder(store.clone(), handler)
        .build()
        .unwrap()
        .start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.stats().await.unwrap().completed < DELIVERIES as u64 {
        assert!(
            Instant::now() < deadline,
            "not drained: {:?}",
            store.stats().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(worker.shutdown(Duration::from_secs(10)).await);
    let handled = handled.lock().unwrap();
    assert_eq!(handled.len(), DELIVERIES, "every event handled");
    assert!(handled.values().all(|runs| *runs == 1), "each handled once");
    eprintln!(
        "{} of {DELIVERIES} receipts acknowledged before the crash, {refused} refused (503) and \
         redelivered: none lost, each handled once",
        acknowledged.len()
    );
}
