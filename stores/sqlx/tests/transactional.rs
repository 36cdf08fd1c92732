//! `SqlStore::complete_in`: a handler records its payment and the event's completion in one
//! transaction, on SQLite (a temporary file), PostgreSQL and MariaDB (ignored by default).
//!
//! Every scenario runs `SANGHO_TRIALS` times (default 2), each trial with a fresh event, on a
//! store table and a business table of its own. The kill scenarios run this test binary again
//! as the app process, running only the test that started it, with [`CHILD_STORE`] set: that
//! test then plays the app process ([`app_process`]) instead of its own scenario. They SIGKILL
//! it after its transaction committed, before it answers.
//!
//! ```sh
//! SANGHO_TRIALS=20 cargo test -p sangho-webhook-sqlx --all-features --test transactional -- --include-ignored
//! ```

mod common;

use std::{
    any::Any,
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use common::{
    TYPE, secret,
    transactional::{Business, Payments, Renewals, hook, trials},
    unique_table,
};
use http::StatusCode;
use sangho_webhook::{
    Outcome, SanghoWebhookLayer,
    store::IdempotencyStore,
    testing::{Answer, Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_sqlx::{SqlStore, dialect::Dialect};
use tokio::sync::Semaphore;
use tower::Layer as _;

/// The lease of the kill scenarios (as in `app_process.rs`).
const KILL_LEASE: Duration = Duration::from_secs(2);

/// The lease of the other scenarios.
const LEASE: Duration = Duration::from_secs(1);

/// A store and a business table in the same database, kept until the test ends.
struct Ctx<D: Dialect> {
    /// The full name of the test, which the app process runs (see [`kill_after_commit`]).
    test: &'static str,
    store: SqlStore<D>,
    business: String,
    /// How the app process opens the same store and table (see [`app_process`]).
    child: String,
    _keep: Vec<Box<dyn Any + Send + Sync>>,
}

/// Drops a business table when the test ends.
struct DropTable(String, fn(String));

impl Drop for DropTable {
    fn drop(&mut self) {
        (self.1)(std::mem::take(&mut self.0));
    }
}

async fn sqlite_ctx(test: &'static str) -> Ctx<sangho_webhook_sqlx::dialect::Sqlite> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shop.db");
    let store = common::sqlite_store_at(&path, 16).await;
    store.migrate().await.unwrap();
    let business = unique_table("pay");
    <sangho_webhook_sqlx::dialect::Sqlite as Business>::create(store.pool(), &business).await;
    Ctx {
        test,
        child: format!("sqlite {} {business}", path.display()),
        store,
        business,
        _keep: vec![Box::new(dir)],
    }
}

async fn postgres_ctx(test: &'static str) -> Ctx<sangho_webhook_sqlx::dialect::Postgres> {
    let store = common::postgres_store("tx", 16).await;
    let business = unique_table("pay");
    let keep_business = DropTable(business.clone(), common::drop_table);
    <sangho_webhook_sqlx::dialect::Postgres as Business>::create(store.pool(), &business).await;
    Ctx {
        test,
        child: format!(
            "postgres {} {} {business}",
            common::postgres_url(),
            store.table()
        ),
        store: store.store.clone(),
        business,
        _keep: vec![Box::new(keep_business), Box::new(store)],
    }
}

#[cfg(feature = "mariadb")]
async fn mariadb_ctx(test: &'static str) -> Ctx<sangho_webhook_sqlx::dialect::MariaDb> {
    let store = common::mariadb_store("tx", 16).await;
    let business = unique_table("pay");
    let keep_business = DropTable(business.clone(), common::drop_mariadb_table);
    <sangho_webhook_sqlx::dialect::MariaDb as Business>::create(store.pool(), &business).await;
    Ctx {
        test,
        child: format!(
            "mariadb {} {} {business}",
            common::mariadb_url(),
            store.table()
        ),
        store: store.store.clone(),
        business,
        _keep: vec![Box::new(keep_business), Box::new(store)],
    }
}

/// The layer of every scenario, with `lease`.
fn layer(store: impl IdempotencyStore, lease: Duration) -> SanghoWebhookLayer {
    SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .with_lease(lease)
        .build()
        .expect("valid settings")
}

/// Delivers `event` through `service`.
async fn deliver<S, B>(service: &S, event: &str) -> Answer
where
    S: tower::Service<http::Request<sangho_webhook::WebhookBody>, Response = http::Response<B>>
        + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    send(
        service,
        Delivery::event(event, TYPE)
            .signed(&secret(), fixtures::NOW)
            .into_request(),
    )
    .await
}

fn outcome(answer: &Answer) -> Option<Outcome> {
    answer.extensions.get::<Outcome>().copied()
}

// ---------------------------------------------------------------------------------------------
// The app process: SIGKILLed after its transaction committed, before its answer.

/// Set only in the app process: the store it opens (a [`Ctx::child`]).
const CHILD_STORE: &str = "SANGHO_TX_CHILD_STORE";

/// The store the app process opens, when this process is one (see [`kill_after_commit`]); the
/// test it runs then plays the app process with [`app_process`] instead of its own scenario.
fn app_process_store() -> Option<String> {
    std::env::var(CHILD_STORE).ok()
}

/// The app process's side: opens `spec` (the value of [`CHILD_STORE`]) and delivers
/// `SANGHO_TX_CHILD_EVENT` through the layer to a payment handler (with `complete_in` when
/// `SANGHO_TX_CHILD_MODE` is `transactional`) that commits, creates the file
/// `SANGHO_TX_CHILD_MARKER` and then never answers.
async fn app_process(spec: String) {
    let event = std::env::var("SANGHO_TX_CHILD_EVENT").expect("the event id");
    let marker = PathBuf::from(std::env::var("SANGHO_TX_CHILD_MARKER").expect("a marker"));
    let transactional = std::env::var("SANGHO_TX_CHILD_MODE").as_deref() == Ok("transactional");
    let words: Vec<&str> = spec.split(' ').collect();
    match words.as_slice() {
        ["postgres", url, table, business] => {
            let store = sangho_webhook_sqlx::PostgresStore::connect(url)
                .await
                .unwrap()
                .with_table_name(*table)
                .unwrap();
            child_delivers(store, business, transactional, &event, marker).await;
        }
        ["sqlite", path, business] => {
            let store = sangho_webhook_sqlx::SqliteStore::connect(&format!("sqlite://{path}"))
                .await
                .unwrap();
            child_delivers(store, business, transactional, &event, marker).await;
        }
        #[cfg(feature = "mariadb")]
        ["mariadb", url, table, business] => {
            let store = sangho_webhook_sqlx::MariaDbStore::connect(url)
                .await
                .unwrap()
                .with_table_name(*table)
                .unwrap();
            child_delivers(store, business, transactional, &event, marker).await;
        }
        other => panic!("unknown store {other:?}"),
    }
}

async fn child_delivers<D: Business>(
    store: SqlStore<D>,
    business: &str,
    transactional: bool,
    event: &str,
    marker: PathBuf,
) {
    let mut payments = Payments::new(store.clone(), business, transactional);
    payments.marker_then_hang = Some(marker);
    deliver(&layer(store, KILL_LEASE).layer(payments.service()), event).await;
}

/// Runs this binary as the app process of `ctx` for `event`, and SIGKILLs it once its
/// transaction committed.
///
/// The app process runs only `ctx.test`, which plays the app process because [`CHILD_STORE`]
/// is set. `--include-ignored` lets it run an ignored test; a name that matches no test makes
/// the app process end at once, and this panic.
fn kill_after_commit<D: Dialect>(ctx: &Ctx<D>, event: &str, transactional: bool, marker: &Path) {
    let mut app: Child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            ctx.test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_STORE, &ctx.child)
        .env("SANGHO_TX_CHILD_EVENT", event)
        .env("SANGHO_TX_CHILD_MARKER", marker)
        .env(
            "SANGHO_TX_CHILD_MODE",
            if transactional {
                "transactional"
            } else {
                "plain"
            },
        )
        .spawn()
        .expect("start the app process");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        if let Ok(Some(status)) = app.try_wait() {
            panic!("the app process ended before its transaction committed: {status}");
        }
        assert!(Instant::now() < deadline, "the app process never committed");
        std::thread::sleep(Duration::from_millis(10));
    }
    common::sigkill(&mut app);
}

/// The app process commits the payment with its completion, and is killed before it answers:
/// a redelivery, at once and after the lease, is a duplicate; the payment is recorded once.
async fn killed_after_a_transactional_commit_is_a_duplicate<D: Business>(ctx: &Ctx<D>) {
    for _ in 0..trials() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("committed");
        let event = unique_event_id("txkill");
        kill_after_commit(ctx, &event, true, &marker);
        let killed = Instant::now();

        let payments = Payments::new(ctx.store.clone(), &ctx.business, true);
        let service = layer(ctx.store.clone(), KILL_LEASE).layer(payments.service());
        let at_once = deliver(&service, &event).await;
        assert_eq!(at_once.status, StatusCode::OK);
        assert_eq!(outcome(&at_once), Some(Outcome::Duplicate));
        tokio::time::sleep(
            (KILL_LEASE + Duration::from_millis(300)).saturating_sub(killed.elapsed()),
        )
        .await;
        let after_the_lease = deliver(&service, &event).await;
        assert_eq!(after_the_lease.status, StatusCode::OK);
        assert_eq!(
            outcome(&after_the_lease),
            Some(Outcome::Duplicate),
            "the completion committed with the payment"
        );
        assert_eq!(payments.calls(), 0, "the handler never ran again");
        assert_eq!(payments.rows(&event).await.len(), 1, "one payment");
    }
}

/// The same without `complete_in`: the payment committed, the layer never completed the
/// event, and after the lease the redelivery records the payment a second time. This is the
/// double that `complete_in` exists to prevent.
async fn killed_after_a_plain_commit_records_the_payment_twice<D: Business>(ctx: &Ctx<D>) {
    for _ in 0..trials() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("committed");
        let event = unique_event_id("plainkill");
        kill_after_commit(ctx, &event, false, &marker);
        let killed = Instant::now();

        let payments = Payments::new(ctx.store.clone(), &ctx.business, false);
        let service = layer(ctx.store.clone(), KILL_LEASE).layer(payments.service());
        let at_once = deliver(&service, &event).await;
        assert_eq!(
            at_once.status,
            StatusCode::CONFLICT,
            "the dead process's claim is in flight"
        );
        loop {
            let answer = deliver(&service, &event).await;
            match answer.status {
                StatusCode::OK => break,
                StatusCode::CONFLICT if killed.elapsed() < KILL_LEASE * 5 => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => panic!("expected a takeover after the lease, got {other}"),
            }
        }
        assert_eq!(payments.calls(), 1, "the redelivery ran the handler again");
        assert_eq!(
            payments.rows(&event).await.len(),
            2,
            "the payment is recorded twice without the transactional completion"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// In one process.

/// A delivery whose claim was taken over (its renewals stalled past the lease) before its
/// `complete_in`: refused, its transaction rolled back; only the second delivery's payment is
/// recorded.
async fn a_stale_owner_is_refused_and_rolled_back<D: Business>(ctx: &Ctx<D>) {
    for _ in 0..trials() {
        let event = unique_event_id("stale");
        let started = Arc::new(Semaphore::new(0));
        let gate = Arc::new(Semaphore::new(0));
        let mut payments = Payments::new(ctx.store.clone(), &ctx.business, true);
        let (on_start, on_gate) = (started.clone(), gate.clone());
        payments.before = Some(hook(move |call| {
            let (started, gate) = (on_start.clone(), on_gate.clone());
            async move {
                if call == 1 {
                    started.add_permits(1);
                    gate.acquire().await.unwrap().forget();
                }
            }
        }));
        let service = layer(Renewals::stalled(ctx.store.clone()), LEASE).layer(payments.service());

        let first = tokio::spawn({
            let (service, event) = (service.clone(), event.clone());
            async move { deliver(&service, &event).await }
        });
        tokio::time::timeout(Duration::from_secs(10), started.acquire())
            .await
            .expect("the first handler starts")
            .unwrap()
            .forget();
        tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
        let second = deliver(&service, &event).await;
        assert_eq!(
            second.status,
            StatusCode::OK,
            "the second delivery took over"
        );
        assert_eq!(outcome(&second), Some(Outcome::Processed));
        gate.add_permits(1);
        let first = first.await.unwrap();
        assert_eq!(
            first.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the stale owner's complete_in is refused"
        );
        assert_eq!(payments.taken_over(), 1);
        assert_eq!(payments.errors(), Vec::<String>::new());
        assert_eq!(
            payments.rows(&event).await.len(),
            1,
            "no payment from the stale owner"
        );
        let again = deliver(&service, &event).await;
        assert_eq!(outcome(&again), Some(Outcome::Duplicate));
        assert_eq!(payments.calls(), 2);
    }
}

/// A handler whose transaction (with `complete_in`) rolled back still answers 2xx: the layer's
/// own completion records the event, so a redelivery is a duplicate.
async fn a_rolled_back_transaction_answered_2xx_is_completed_by_the_layer<D: Business>(
    ctx: &Ctx<D>,
) {
    for _ in 0..trials() {
        let event = unique_event_id("rollback");
        let mut payments = Payments::new(ctx.store.clone(), &ctx.business, true);
        payments.rollback = true;
        let service = layer(ctx.store.clone(), LEASE).layer(payments.service());
        let first = deliver(&service, &event).await;
        assert_eq!(first.status, StatusCode::OK);
        assert_eq!(outcome(&first), Some(Outcome::Processed));
        assert_eq!(payments.rows(&event).await.len(), 0, "rolled back");
        let again = deliver(&service, &event).await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(
            outcome(&again),
            Some(Outcome::Duplicate),
            "the layer's completion recorded the event"
        );
        assert_eq!(payments.calls(), 1);
        assert_eq!(payments.errors(), Vec::<String>::new());
    }
}

/// 200 deliveries of one event over 3 seconds, while each handler takes longer than the lease
/// and its renewals stall: several deliveries take the event over in turn and run the handler,
/// but only one transaction commits: exactly one payment.
async fn two_hundred_concurrent_deliveries_record_one_payment<D: Business>(ctx: &Ctx<D>) {
    for _ in 0..trials() {
        let event = unique_event_id("twohundred");
        let mut payments = Payments::new(ctx.store.clone(), &ctx.business, true);
        payments.before = Some(hook(|_| tokio::time::sleep(LEASE * 3 / 2)));
        let service = layer(Renewals::stalled(ctx.store.clone()), LEASE).layer(payments.service());
        let deliveries: Vec<_> = (0..200u64)
            .map(|i| {
                let (service, event) = (service.clone(), event.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(15 * i)).await;
                    deliver(&service, &event).await.status
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for delivery in deliveries {
            statuses.push(delivery.await.unwrap());
        }
        let unexpected: Vec<_> = statuses
            .iter()
            .filter(|status| {
                ![
                    StatusCode::OK,
                    StatusCode::CONFLICT,
                    StatusCode::INTERNAL_SERVER_ERROR,
                ]
                .contains(status)
            })
            .collect();
        assert!(unexpected.is_empty(), "unexpected answers: {unexpected:?}");
        assert!(
            payments.calls() >= 2,
            "the event was taken over at least once (handler calls: {})",
            payments.calls()
        );
        assert_eq!(payments.taken_over(), payments.calls() - 1);
        assert_eq!(payments.errors(), Vec::<String>::new());
        assert_eq!(payments.rows(&event).await.len(), 1, "exactly one payment");
        let again = deliver(&service, &event).await;
        assert_eq!(outcome(&again), Some(Outcome::Duplicate));
    }
}

/// The log lines of this test binary (warnings and errors), for the renewal scenario.
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || LogSink(sink.clone()))
            .try_init();
        logs
    })
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl Write for LogSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The logged lines about `event`.
fn logged_about(event: &str) -> Vec<String> {
    String::from_utf8_lossy(&logs().lock().unwrap())
        .lines()
        .filter(|line| line.contains(event))
        .map(str::to_owned)
        .collect()
}

/// A handler keeps its transaction open for 3 s (three leases) after `complete_in`: the layer's
/// renewals never wait on the locked row (none takes more than 500 ms), nothing is logged about
/// the event, redeliveries meanwhile are answered 409 or duplicate (never 503, never a second
/// run), and the delivery ends processed.
async fn renewal_never_waits_on_the_held_row<D: Business>(ctx: &Ctx<D>) {
    logs();
    for _ in 0..trials() {
        let event = unique_event_id("held");
        let held = Arc::new(Semaphore::new(0));
        let mut payments = Payments::new(ctx.store.clone(), &ctx.business, true);
        let on_held = held.clone();
        payments.held = Some(hook(move |_| {
            let held = on_held.clone();
            async move {
                held.add_permits(1);
                tokio::time::sleep(LEASE * 3).await;
            }
        }));
        let store = Renewals::timed(ctx.store.clone());
        let service = layer(store.clone(), LEASE).layer(payments.service());
        let first = tokio::spawn({
            let (service, event) = (service.clone(), event.clone());
            async move { deliver(&service, &event).await }
        });
        tokio::time::timeout(Duration::from_secs(10), held.acquire())
            .await
            .expect("the transaction holds the completion")
            .unwrap()
            .forget();
        // Within the hold, each waiting less than the store's lock timeout (2 s; on SQLite the
        // busy timeout) for the commit at 3 s: by 0.7 s and 1.2 s of margin, so that a loaded
        // machine's late commit is still within it.
        let redeliveries: Vec<_> = [1700, 2200]
            .into_iter()
            .map(|delay| {
                let (service, event) = (service.clone(), event.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    deliver(&service, &event).await
                })
            })
            .collect();
        for redelivery in redeliveries {
            let answer = redelivery.await.unwrap();
            eprintln!(
                "a redelivery while the completion is held: {} {:?}",
                answer.status,
                outcome(&answer)
            );
            assert!(
                answer.status == StatusCode::CONFLICT
                    || outcome(&answer) == Some(Outcome::Duplicate),
                "a redelivery meanwhile: 409 or a duplicate, got {} ({:?})",
                answer.status,
                outcome(&answer)
            );
        }
        let first = first.await.unwrap();
        assert_eq!(first.status, StatusCode::OK);
        assert_eq!(outcome(&first), Some(Outcome::Processed));
        let (renewals, longest) = store.longest();
        assert!(
            longest < Duration::from_millis(500),
            "a renewal waited {longest:?} (on the row the transaction holds)"
        );
        assert_eq!(
            renewals, 0,
            "the layer stops renewing once the transaction holds the completion"
        );
        assert_eq!(logged_about(&event), Vec::<String>::new());
        assert_eq!(payments.calls(), 1);
        assert_eq!(payments.rows(&event).await.len(), 1);
    }
}

// ---------------------------------------------------------------------------------------------

/// Runs `$body` on every SQL store: `$name::sqlite`, `$name::postgres`, `$name::mariadb`.
///
/// In the app process of a kill scenario, the test it runs plays the app process instead.
macro_rules! on_every_store {
    ($($name:ident => $body:ident;)*) => {$(
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                if let Some(spec) = app_process_store() {
                    return app_process(spec).await;
                }
                $body(&sqlite_ctx(concat!(stringify!($name), "::sqlite")).await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
            async fn postgres() {
                if let Some(spec) = app_process_store() {
                    return app_process(spec).await;
                }
                $body(&postgres_ctx(concat!(stringify!($name), "::postgres")).await).await;
            }

            #[cfg(feature = "mariadb")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            #[ignore = "needs MariaDB: run with --features mariadb -- --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
            async fn mariadb() {
                if let Some(spec) = app_process_store() {
                    return app_process(spec).await;
                }
                $body(&mariadb_ctx(concat!(stringify!($name), "::mariadb")).await).await;
            }
        }
    )*};
}

on_every_store! {
    a_payment_committed_with_its_completion_then_killed_is_recorded_once
        => killed_after_a_transactional_commit_is_a_duplicate;
    without_the_transactional_completion_a_kill_after_the_commit_records_the_payment_twice
        => killed_after_a_plain_commit_records_the_payment_twice;
    a_stale_owners_transaction_is_refused_and_rolled_back
        => a_stale_owner_is_refused_and_rolled_back;
    a_rolled_back_transaction_answered_2xx_is_completed_by_the_layer
        => a_rolled_back_transaction_answered_2xx_is_completed_by_the_layer;
    two_hundred_concurrent_deliveries_record_one_payment
        => two_hundred_concurrent_deliveries_record_one_payment;
    renewal_never_waits_on_the_row_the_transaction_holds
        => renewal_never_waits_on_the_held_row;
}
