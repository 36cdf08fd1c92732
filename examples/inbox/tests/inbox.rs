//! The inbox example: a delivery is answered 202 once stored and then processed by the
//! workers; the health check reports the inbox's numbers; and the binary refuses stores that
//! would acknowledge events a restart loses.

use std::time::{Duration, Instant};

use http::StatusCode;
use sangho_example_inbox::{Health, app, handlers, open};
use sangho_webhook::{
    inbox::{EventState, InboxReceiver, InboxWorker},
    testing::{Delivery, conformance::unique_event_id, fixtures, send},
};

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_sangho-example-inbox");

/// The example's pieces over an inbox in a temporary SQLite file, its workers started.
struct Example {
    _dir: tempfile::TempDir,
    inbox: std::sync::Arc<dyn sangho_webhook::inbox::Inbox>,
    receiver: InboxReceiver,
    workers: sangho_webhook::inbox::WorkerHandle,
    purge: sangho_webhook_sqlx::PurgeTask,
}

impl Example {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("inbox.db").display());
        let (store, purge) = open(&url).await.unwrap();
        let inbox = store.inbox();
        let receiver = InboxReceiver::builder(fixtures::secret(), inbox.clone())
            .with_clock(fixtures::fixed_clock)
            .build()
            .unwrap();
        let workers = InboxWorker::builder(inbox.clone(), handlers())
            .build()
            .unwrap()
            .start();
        Self {
            _dir: dir,
            inbox,
            receiver,
            workers,
            purge,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_stored_answered_202_and_processed_by_the_workers() {
    let Example {
        _dir,
        inbox,
        receiver,
        workers,
        purge,
    } = Example::start().await;
    let health = Health::new(inbox.clone(), workers.metrics()).with_gauges_max_age(Duration::ZERO);
    let app = app(receiver, health);

    let id = unique_event_id("example");
    let delivery =
        Delivery::event(&id, fixtures::EVENT_TYPE).signed(&fixtures::secret(), fixtures::NOW);
    let answer = send(&app, delivery.clone().into_request()).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = inbox
            .show(&id)
            .await
            .unwrap()
            .map(|record| record.summary.state);
        if state == Some(EventState::Completed) {
            break;
        }
        assert!(Instant::now() < deadline, "not processed: {state:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        send(&app, delivery.into_request()).await.status,
        StatusCode::OK,
        "a duplicate"
    );

    let health = send(
        &app,
        http::Request::get("/health").body(String::new()).unwrap(),
    )
    .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json()["received"], 0);
    assert_eq!(health.json()["problems"], serde_json::json!([]));
    assert!(workers.shutdown(Duration::from_secs(10)).await);
    purge.stop().await;
}

/// With the workers stopped and an event waiting, the health check fails once the event waited
/// longer than the limits allow, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_fails_when_events_wait_and_no_worker_takes_them() {
    let Example {
        _dir,
        inbox,
        receiver,
        workers,
        purge,
    } = Example::start().await;
    let health = Health::new(inbox.clone(), workers.metrics())
        .with_gauges_max_age(Duration::ZERO)
        .with_limits(Duration::from_secs(1), Duration::from_secs(1));
    let app = app(receiver, health);
    let check = || async {
        send(
            &app,
            http::Request::get("/health").body(String::new()).unwrap(),
        )
        .await
    };
    assert!(workers.shutdown(Duration::from_secs(10)).await, "stopped");
    assert_eq!(check().await.status, StatusCode::OK, "nothing waits");

    let delivery = Delivery::event(&unique_event_id("waits"), fixtures::EVENT_TYPE)
        .signed(&fixtures::secret(), fixtures::NOW);
    assert_eq!(
        send(&app, delivery.into_request()).await.status,
        StatusCode::ACCEPTED
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answer = check().await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    let problems = answer.json()["problems"].clone();
    assert_eq!(
        problems,
        serde_json::json!([
            "the oldest waiting event waited too long",
            "events wait and no worker takes them"
        ])
    );
    assert_eq!(answer.json()["received"], 1);
    purge.stop().await;
}

#[test]
fn stores_that_would_lose_acknowledged_events_are_refused_at_start() {
    for url in ["memory:", "redis://127.0.0.1:6379"] {
        let output = std::process::Command::new(EXAMPLE)
            .env("SANGHO_STORE_URL", url)
            .env("SANGHO_WEBHOOK_ADDR", "127.0.0.1:0")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{url} must be refused");
        let log = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
        assert!(
            log.contains("inbox mode needs a durable, shared store"),
            "{url}: {log}"
        );
    }
}
