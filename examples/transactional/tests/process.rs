//! The transactional example's binary over PostgreSQL: SIGTERM while a delivery is in
//! progress (its handler waits for a row lock the test holds) lets the delivery finish, and the
//! handler of a provider that hung up, before the process exits 0.
//!
//! These tests need PostgreSQL (ignored by default: run with `--include-ignored`, against
//! `SANGHO_TEST_POSTGRES_URL`, by default `postgres://postgres@127.0.0.1:5432/test`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{Request, StatusCode};
use sangho_examples_support::testing::{ExampleProcess, read_answer, send_raw};
use sangho_webhook::WebhookBody;
use sangho_webhook::testing::{
    Delivery,
    conformance::unique_event_id,
    fixtures::{self, secret},
};
use sangho_webhook_sqlx::sqlx::{self, PgPool, Postgres, Transaction};

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_sangho-example-transactional");

/// The PostgreSQL server of the tests.
fn postgres_url() -> String {
    std::env::var("SANGHO_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A `payment_intent.succeeded` for `id`, signed now (the example runs at the real clock).
fn payment(id: &str) -> Request<WebhookBody> {
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
    let mut example = ExampleProcess::start(
        EXAMPLE,
        &[
            ("SANGHO_STORE_URL", &url),
            ("SANGHO_WEBHOOK_SECRET", fixtures::SECRET),
        ],
    );
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
