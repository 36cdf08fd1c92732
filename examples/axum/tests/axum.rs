//! `examples/axum.rs`: the layer sits on the webhook route's `POST` only, so its neighbours,
//! other methods and unknown paths answer as they would without it; the example's process stops
//! gracefully on SIGTERM and Ctrl-C, and never logs the store's password.
//!
//! The example's file is compiled into this test, so what is tested is what users read; the
//! process tests run its `main` in a process of its own (see `example_process`).
//!
//! The tests with a delivery in progress at SIGTERM need PostgreSQL (ignored by default: run
//! with `--include-ignored`, against `SANGHO_TEST_POSTGRES_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/test`).

#[allow(dead_code)]
#[path = "../examples/axum.rs"]
mod example;

mod common;
mod example_process;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{SpyStore, TYPE, layer, secret};
use example_process::{ExampleProcess, read_answer, send_raw};
use http::{Request, StatusCode, header};
use http_body_util::Full;
use sangho_webhook::{
    signature::Secret,
    store::MokaStore,
    testing::{Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_sqlx::sqlx::{self, PgPool, Postgres, Transaction};

/// The example's process (see `example_process`): runs its `main`.
#[test]
#[ignore = "the example's process, started by the tests that need one"]
fn example_process() {
    example_process::run_if_child(example::main);
}

fn get(path: &str) -> Request<Full<bytes::Bytes>> {
    Request::get(path).body(Full::default()).unwrap()
}

#[tokio::test]
async fn the_health_check_beside_the_webhook_route_answers_200() {
    let app = example::app(layer(MokaStore::new()));
    assert_eq!(send(&app, get("/health")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn an_unknown_path_answers_404() {
    let app = example::app(layer(MokaStore::new()));
    assert_eq!(
        send(&app, get("/nowhere")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_get_on_the_webhook_route_answers_405_without_the_layer() {
    let store = SpyStore::default();
    let app = example::app(layer(store.clone()));

    let answer = send(&app, get("/webhooks/sangho")).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.headers[header::ALLOW], "POST");

    // Signed, so that only the method is wrong: the layer does not even claim it.
    let mut signed = Delivery::event("evt_axum_get", TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    *signed.method_mut() = http::Method::GET;
    assert_eq!(
        send(&app, signed).await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(store.operations(), 0, "the layer never saw either request");
}

#[tokio::test]
async fn the_webhook_route_receives_a_signed_event() {
    let app = example::app(layer(MokaStore::new()));
    let delivery = Delivery::event("evt_axum", TYPE).signed(&secret(), fixtures::NOW);
    let answer = send(&app, delivery.into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), serde_json::json!({ "received": true }));
}

/// The SQLite mode records a `payment_intent.succeeded` in `payments` with the event's
/// completion: the redelivery is a duplicate, and the payment is recorded once.
#[tokio::test]
async fn the_sqlite_mode_records_the_payment_with_the_completion() {
    let dir = std::env::temp_dir().join(format!(
        "sangho-axum-example-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("shop.db").display());
    let webhooks = example::webhooks(Secret::new(fixtures::SECRET).unwrap(), &url)
        .await
        .expect("the SQLite store and the payments table");
    let payments = webhooks.payments.clone().expect("a SQL store has payments");
    let app = example::app_with_payments(webhooks.layer, webhooks.payments);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let body = r#"{"id":"evt_paid","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":500}}}"#;
    let deliver = || {
        send(
            &app,
            Delivery::body(body).signed(&secret(), now).into_request(),
        )
    };

    let first = deliver().await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json(), serde_json::json!({ "received": true }));
    let again = deliver().await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json()["duplicate"], true);

    let example::Payments::Sqlite(store) = payments else {
        panic!("the SQLite mode");
    };
    let rows: Vec<(String, Option<i64>)> =
        sangho_webhook_sqlx::sqlx::query_as("SELECT event_id, amount FROM payments")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(rows, vec![("evt_paid".to_owned(), Some(500))]);
    if let Some(purge) = webhooks.purge {
        purge.stop().await;
    }
    store.pool().close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_logged_store_url_holds_no_credential() {
    for (url, logged) in [
        (
            "postgres://db.internal/shop?user=shop&password=secret",
            "postgres://db.internal/shop",
        ),
        (
            "postgres://db.internal/shop?password=secret",
            "postgres://db.internal/shop",
        ),
        (
            "postgres://shop:secret@db.internal:5432/shop",
            "postgres://db.internal:5432/shop",
        ),
        (
            "postgresql://shop:secret@db.internal/shop?sslmode=require&password=secret#x",
            "postgresql://db.internal/shop",
        ),
        (
            "redis://:secret@127.0.0.1:6379/0",
            "redis://127.0.0.1:6379/0",
        ),
        // Unencoded `@` in the password: the host is after the last one.
        ("redis://u:se@cret@cache:6379", "redis://cache:6379"),
        // Where the password ends cannot be told: the scheme only.
        ("postgres://shop:se?cret@db.internal/shop", "postgres://…"),
        (
            "postgres://db.internal/shop?password=se@cret",
            "postgres://…",
        ),
        ("sqlite://sangho-webhooks.db", "sqlite://sangho-webhooks.db"),
        ("sqlite:shop.db?password=secret", "sqlite:…"),
        ("memory:", "memory:"),
    ] {
        let shown = example::loggable_url(url);
        for part in ["secret", "se", "cret"] {
            assert!(!shown.contains(part), "{url} shows {part:?}: {shown}");
        }
        assert_eq!(shown, logged, "{url}");
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn the_example_never_logs_the_store_password() {
    let port = closed_port();
    for url in [
        format!("postgres://127.0.0.1:{port}/test?user=shop&password=secret"),
        format!("postgres://127.0.0.1:{port}/test?password=secret"),
        format!("postgres://shop:secret@127.0.0.1:{port}/test"),
    ] {
        let mut example = ExampleProcess::start(&[
            ("SANGHO_STORE_URL", &url),
            ("SANGHO_WEBHOOK_SECRET", fixtures::SECRET),
        ]);
        let status = example.wait(Duration::from_secs(60)).await;
        let output = example.output();
        assert_eq!(status.code(), Some(1), "the store is unreachable: {output}");
        assert!(!output.contains("secret"), "{url}: {output}");
        assert!(
            output.contains(&format!("store=postgres://127.0.0.1:{port}/test")),
            "the log shows where the store is: {output}"
        );
    }
}

#[tokio::test]
async fn sigterm_stops_the_example_with_exit_status_0() {
    let mut example = ExampleProcess::start(&[("SANGHO_STORE_URL", "memory:")]);
    example.wait_listening().await;
    example.signal("TERM");
    let status = example.wait(Duration::from_secs(10)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert!(output.contains("SIGTERM: shutting down"), "{output}");
    assert!(output.contains("stopped: nothing left running"), "{output}");
}

#[tokio::test]
async fn ctrl_c_stops_the_example_with_exit_status_0() {
    let mut example = ExampleProcess::start(&[("SANGHO_STORE_URL", "memory:")]);
    example.wait_listening().await;
    example.signal("INT");
    let status = example.wait(Duration::from_secs(10)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert!(output.contains("Ctrl-C: shutting down"), "{output}");
}

/// The PostgreSQL server of the tests.
fn postgres_url() -> String {
    std::env::var("SANGHO_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A `payment_intent.succeeded` for `id`, signed now (the example runs at the real clock).
fn payment(id: &str) -> Request<Full<bytes::Bytes>> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let body = serde_json::json!({
        "id": id,
        "type": "payment_intent.succeeded",
        "data": { "object": { "id": format!("pi_{id}"), "amount": 700 } },
    });
    Delivery::body(body.to_string())
        .signed(&secret(), now)
        .into_request()
}

/// A transaction of the test's that holds `id`'s row of the `payments` table: the example's
/// handler, inserting the same row, waits for it.
struct PaymentLock {
    transaction: Transaction<'static, Postgres>,
    backend: i32,
}

impl PaymentLock {
    async fn hold(pool: &PgPool, id: &str) -> Self {
        let mut transaction = pool.begin().await.unwrap();
        let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *transaction)
            .await
            .unwrap();
        sqlx::query("INSERT INTO payments (event_id) VALUES ($1)")
            .bind(id)
            .execute(&mut *transaction)
            .await
            .unwrap();
        Self {
            transaction,
            backend,
        }
    }

    /// Waits until another session (the handler's) waits for this lock.
    async fn wait_until_blocking(&self, pool: &PgPool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
            )
            .bind(self.backend)
            .fetch_one(pool)
            .await
            .unwrap();
            if waiting > 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the handler never waited for the payment row"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Rolls back: the handler's insert goes through.
    async fn release(self) {
        self.transaction.rollback().await.unwrap();
    }
}

async fn payments_recorded(pool: &PgPool, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM payments WHERE event_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The example over PostgreSQL, listening, and a pool of the test's on the same database.
async fn start_on_postgres() -> (ExampleProcess, std::net::SocketAddr, PgPool) {
    let url = postgres_url();
    let mut example = ExampleProcess::start(&[
        ("SANGHO_STORE_URL", &url),
        ("SANGHO_WEBHOOK_SECRET", fixtures::SECRET),
    ]);
    let address = example.wait_listening().await;
    let pool = PgPool::connect(&url)
        .await
        .expect("PostgreSQL is reachable (set SANGHO_TEST_POSTGRES_URL)");
    (example, address, pool)
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn sigterm_answers_a_delivery_in_progress_before_exiting() {
    let (mut example, address, pool) = start_on_postgres().await;
    let id = unique_event_id("sig_answer");
    let lock = PaymentLock::hold(&pool, &id).await;
    let connection = send_raw(address, payment(&id)).await;
    lock.wait_until_blocking(&pool).await;

    example.signal("TERM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        example.is_running(),
        "the example waits for the delivery in progress: {}",
        example.output()
    );
    lock.release().await;

    let (status, body) = read_answer(connection).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains(r#""received":true"#), "{body}");
    let status = example.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "{status}: {}", example.output());
    assert_eq!(payments_recorded(&pool, &id).await, 1);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn sigterm_waits_for_a_handler_whose_client_hung_up() {
    let (mut example, address, pool) = start_on_postgres().await;
    let id = unique_event_id("sig_hangup");
    let lock = PaymentLock::hold(&pool, &id).await;
    let connection = send_raw(address, payment(&id)).await;
    lock.wait_until_blocking(&pool).await;
    // The provider's own timeout: it hangs up while the handler runs.
    drop(connection);
    tokio::time::sleep(Duration::from_millis(200)).await;

    example.signal("TERM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        example.is_running(),
        "the example waits for the handler still running: {}",
        example.output()
    );
    lock.release().await;

    let status = example.wait(Duration::from_secs(30)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert_eq!(
        payments_recorded(&pool, &id).await,
        1,
        "the handler finished before the exit: {output}"
    );
    assert!(output.contains("stopped: nothing left running"), "{output}");
}
