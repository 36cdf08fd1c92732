//! Inbox mode's promise under a fault: every receipt answered 2xx is durable. 200 concurrent
//! deliveries while something crashes mid-burst: afterwards every event answered 2xx is in the
//! inbox, the sender redelivers the others until they are, and the workers then handle each of
//! the 200 exactly once.
//!
//! - PostgreSQL: the database (a server of the test's own, `common/private_postgres.rs`)
//!   crashes (`pg_ctl stop -m immediate`) and restarts.
//! - MariaDB: the database (a server of the test's own, `common/private_mariadb.rs`) is killed
//!   with SIGKILL and restarts on its data directory.
//! - SQLite: the app process is killed with SIGKILL. It is this test binary run again as a
//!   child, running only the test that started it, with [`APP_DATABASE`] set: that test then
//!   plays the app ([`app_process`]), an `InboxReceiver` over a `SqliteStore` on the test's
//!   file served over HTTP, instead of its own scenario. The test then opens the file itself.
//!
//! The PostgreSQL and MariaDB tests are ignored by default: run with `cargo test -p
//! sangho-webhook-sqlx --all-features -- --include-ignored` on a machine with PostgreSQL's
//! server binaries (`/usr/lib/postgresql/*/bin`, or `SANGHO_TEST_PG_BIN`) and MariaDB's
//! (`mariadb-install-db` and `mariadbd` on the `PATH`, or in `SANGHO_TEST_MARIADB_BIN`). The
//! SQLite one needs no server and always runs.

mod common;

use std::{
    collections::HashMap,
    future::Future,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::private_postgres::PrivatePostgres;
use http::StatusCode;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use sangho_webhook::{
    SanghoEvent, WebhookBody,
    inbox::{Inbox, InboxReceiver, InboxWorker},
    testing::{Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_sqlx::{PostgresStore, SqliteStore, sqlx::postgres::PgPoolOptions};

const DELIVERIES: usize = 200;

/// The time between two deliveries of a burst: 200 deliveries in 0.6 s.
const SPACING: Duration = Duration::from_millis(3);

/// What each delivery of the burst was answered: its status, or `None` when the connection
/// broke before an answer came.
type Answers = Vec<(String, Option<StatusCode>)>;

/// A signed delivery of event `id`.
fn delivery(id: &str) -> http::Request<WebhookBody> {
    Delivery::event(id, fixtures::EVENT_TYPE)
        .signed(&fixtures::secret(), fixtures::NOW)
        .into_request()
}

/// The receiver of every test, over `inbox`: a receipt not stored within 2 s is answered 503.
fn receiver(inbox: impl Inbox) -> InboxReceiver {
    InboxReceiver::builder(fixtures::secret(), inbox)
        .with_clock(fixtures::fixed_clock)
        .with_store_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// Sends [`DELIVERIES`] deliveries of fresh events through `deliver`, one every
/// [`SPACING`], and runs `fault` once a quarter of them are answered: what each was answered.
/// Panics unless every answer is a 2xx, a 503 or none, and unless the fault came mid-burst:
/// some deliveries acknowledged, some not. (Spaced out, the burst still has deliveries to send
/// after the fault however fast the store answers them: a group commit answers 64 at once.)
async fn burst_with_a_fault<F, A>(deliver: F, fault: impl FnOnce()) -> Answers
where
    F: Fn(http::Request<WebhookBody>) -> A,
    A: Future<Output = Option<StatusCode>> + Send + 'static,
{
    let answered = Arc::new(AtomicUsize::new(0));
    let mut burst = tokio::task::JoinSet::new();
    for n in 0..DELIVERIES {
        let id = unique_event_id("durable");
        let (answer, answered) = (deliver(delivery(&id)), answered.clone());
        burst.spawn(async move {
            tokio::time::sleep(SPACING * n as u32).await;
            let status = answer.await;
            answered.fetch_add(1, Ordering::SeqCst);
            (id, status)
        });
    }
    while answered.load(Ordering::SeqCst) < DELIVERIES / 4 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    fault();
    let answers = burst.join_all().await;
    for (_, status) in &answers {
        assert!(
            status.is_none_or(|status| status.is_success() || status.as_u16() == 503),
            "{status:?}"
        );
    }
    let acknowledged = acknowledged(&answers);
    assert!(
        acknowledged > 0 && acknowledged < DELIVERIES,
        "the fault came mid-burst: {acknowledged} of {DELIVERIES} acknowledged"
    );
    answers
}

/// How many of `answers` are 2xx.
fn acknowledged(answers: &Answers) -> usize {
    answers
        .iter()
        .filter(|(_, status)| status.is_some_and(|status| status.is_success()))
        .count()
}

/// After `fault`: every event answered 2xx in `answers` is in `store`; each other one is
/// delivered to `receiver` (over `store`) until it is acknowledged; workers over `store` then
/// handle each of the [`DELIVERIES`] events exactly once.
async fn none_lost_and_each_handled_once<S: Inbox + Clone>(
    fault: &str,
    store: &S,
    receiver: &InboxReceiver,
    answers: &Answers,
) {
    let mut stored_unacknowledged = 0;
    for (id, status) in answers {
        let stored = store.show(id).await.unwrap().is_some();
        if status.is_some_and(|status| status.is_success()) {
            assert!(stored, "{id} was answered 2xx and lost");
        } else {
            stored_unacknowledged += usize::from(stored);
        }
    }
    // The sender redelivers every unacknowledged event until it is acknowledged.
    let deadline = Instant::now() + Duration::from_secs(60);
    for (id, status) in answers {
        if status.is_some_and(|status| status.is_success()) {
            continue;
        }
        while !send(receiver, delivery(id)).await.status.is_success() {
            assert!(
                Instant::now() < deadline,
                "{id} never acknowledged after the fault"
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
    let lost = answers
        .iter()
        .filter(|(_, status)| status.is_none())
        .count();
    eprintln!(
        "{fault}: {} of {DELIVERIES} receipts acknowledged before it, {} answered 503, {lost} \
         without an answer ({stored_unacknowledged} of these unacknowledged ones stored \
         nonetheless); all redelivered: none lost, each handled once",
        acknowledged(answers),
        answers.len() - acknowledged(answers) - lost,
    );
}

/// The scenario of a database server of the test's own (`database`): the burst through a
/// receiver over `store` (migrated), `crash` of the server once a quarter of it is answered,
/// `restart`, then [`none_lost_and_each_handled_once`].
async fn a_crash_of_the_database_loses_no_acknowledged_receipt<S: Inbox + Clone>(
    database: &str,
    store: S,
    crash: impl FnOnce(),
    restart: impl FnOnce(),
) {
    let receiver = receiver(store.clone());
    let answers = burst_with_a_fault(
        |request| {
            let receiver = receiver.clone();
            async move { Some(send(&receiver, request).await.status) }
        },
        crash,
    )
    .await;
    assert!(
        answers.iter().all(|(_, status)| status.is_some()),
        "the receiver answers every delivery"
    );
    restart();
    let fault = format!("{database} crashed");
    none_lost_and_each_handled_once(&fault, &store, &receiver, &answers).await;
}

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
    a_crash_of_the_database_loses_no_acknowledged_receipt(
        "PostgreSQL",
        store,
        || server.crash(),
        || server.start_again(),
    )
    .await;
}

#[cfg(feature = "mariadb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MariaDB's server binaries (mariadb-install-db, mariadbd): run with --include-ignored"]
async fn every_acknowledged_receipt_survives_a_crash_of_the_database_on_mariadb() {
    use common::private_mariadb::PrivateMariaDb;
    use sangho_webhook_sqlx::{MariaDbStore, sqlx::mysql::MySqlPoolOptions};

    let server = PrivateMariaDb::start(&[]);
    let pool = MySqlPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&server.url())
        .await
        .unwrap();
    let store = MariaDbStore::new(pool);
    store.migrate().await.unwrap();
    a_crash_of_the_database_loses_no_acknowledged_receipt(
        "MariaDB",
        store,
        || server.crash(),
        || server.start_again(),
    )
    .await;
}

/// Set only in the app process: the path of its SQLite file (see [`start_app`]).
const APP_DATABASE: &str = "SANGHO_INBOX_APP_DATABASE";
/// The file in which the app process writes the address it serves on, once it does.
const APP_ADDRESS: &str = "SANGHO_INBOX_APP_ADDRESS";

/// The app process's side: serves the receiver over a `SqliteStore` on the file
/// [`APP_DATABASE`] (as `SqliteStore::connect` opens it) over HTTP on a free loopback port,
/// writes that address into [`APP_ADDRESS`], and serves until it is killed.
async fn app_process(database: String) {
    let address_file = PathBuf::from(std::env::var(APP_ADDRESS).expect("the address file"));
    let store = SqliteStore::connect(&format!("sqlite://{database}"))
        .await
        .unwrap();
    let app = axum::Router::new().route_service("/webhooks/sangho", receiver(store));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let written = address_file.with_extension("partial");
    std::fs::write(&written, listener.local_addr().unwrap().to_string()).unwrap();
    std::fs::rename(&written, &address_file).unwrap();
    axum::serve(listener, app).await.unwrap();
}

/// Runs this binary as the app process over `database`, and answers it with the address it
/// serves on once it does.
///
/// The app process runs only `test` (the calling test's full name), which plays the app
/// process because [`APP_DATABASE`] is set; a name that matches no test makes it end at
/// once, and this panic.
fn start_app(test: &str, database: &Path, address_file: &Path) -> (Child, SocketAddr) {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(APP_DATABASE, database)
        .env(APP_ADDRESS, address_file)
        .spawn()
        .expect("start the app process");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !address_file.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the app process ended before it served: {status}");
        }
        assert!(Instant::now() < deadline, "the app process never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    let address = std::fs::read_to_string(address_file).unwrap();
    (child, address.parse().expect("the app's address"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_receipt_survives_a_kill_of_the_app_on_sqlite() {
    if let Ok(database) = std::env::var(APP_DATABASE) {
        return app_process(database).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("inbox.db");
    let created = common::sqlite_store_at(&database, 1).await;
    created.migrate().await.unwrap();
    created.pool().close().await;
    let (mut app, address) = start_app(
        "every_acknowledged_receipt_survives_a_kill_of_the_app_on_sqlite",
        &database,
        &dir.path().join("address"),
    );

    let client = Client::builder(TokioExecutor::new()).build_http::<WebhookBody>();
    let answers = burst_with_a_fault(
        |request| {
            let answer = client.request(common::to(address, request));
            async move { answer.await.ok().map(|response| response.status()) }
        },
        || common::sigkill(&mut app),
    )
    .await;

    // The app is gone: the test opens its file, as the next app process would.
    let store = common::sqlite_store_at(&database, 4).await;
    let receiver = receiver(store.clone());
    none_lost_and_each_handled_once("the SQLite app killed", &store, &receiver, &answers).await;
}
