//! kill -9 of an app process mid-handler: a second process takes the event over once the
//! claim's lease has run out, and processes it exactly once (PostgreSQL, SQLite).
//!
//! The "app process" is this test binary run again as a child, running only the test that
//! started it, with [`CHILD_STORE`] set: that test then plays the app process
//! ([`app_process`]) instead of its own scenario. The app process serves one delivery through
//! the layer over the store, and its handler never returns. The test kills it with SIGKILL
//! once the handler runs.
//!
//! The PostgreSQL test is ignored by default (run with `--include-ignored`, against
//! `SANGHO_TEST_POSTGRES_URL`); the SQLite one runs on a temporary file.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use common::{TYPE, secret};
use http::StatusCode;
use sangho_webhook::{
    SanghoWebhookLayer,
    store::IdempotencyStore,
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_sqlx::{PostgresStore, SqliteStore};
use tower::Layer as _;

/// The lease of both processes.
const LEASE: Duration = Duration::from_secs(2);

/// The layer both processes use.
fn layer(store: impl IdempotencyStore) -> SanghoWebhookLayer {
    SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .with_lease(LEASE)
        .build()
        .expect("valid settings")
}

/// Set only in the app process: the store it opens, `postgres <url> <table>` or
/// `sqlite <path>`.
const CHILD_STORE: &str = "SANGHO_APP_CHILD_STORE";

/// The store the app process opens, when this process is one (see [`start_app`]); the test it
/// runs then plays the app process with [`app_process`] instead of its own scenario.
fn app_process_store() -> Option<String> {
    std::env::var(CHILD_STORE).ok()
}

/// The app process's side: opens `store` (the value of [`CHILD_STORE`]) and delivers
/// `SANGHO_APP_CHILD_EVENT` through the layer to a handler that creates the file
/// `SANGHO_APP_CHILD_MARKER` and then never returns.
async fn app_process(store: String) {
    let event = std::env::var("SANGHO_APP_CHILD_EVENT").expect("the event id");
    let marker = PathBuf::from(std::env::var("SANGHO_APP_CHILD_MARKER").expect("a marker"));
    let words: Vec<&str> = store.split(' ').collect();
    let handler = tower::service_fn(move |_request: http::Request<_>| {
        let marker = marker.clone();
        async move {
            std::fs::write(&marker, b"in the handler").expect("write the marker");
            std::future::pending::<()>().await;
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::new(),
            )))
        }
    });
    let request = Delivery::event(&event, TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    match words.as_slice() {
        ["postgres", url, table] => {
            let store = PostgresStore::connect(url)
                .await
                .unwrap()
                .with_table_name(*table)
                .unwrap();
            send(&layer(store).layer(handler), request).await;
        }
        ["sqlite", path] => {
            let store = SqliteStore::connect(&format!("sqlite://{path}"))
                .await
                .unwrap();
            send(&layer(store).layer(handler), request).await;
        }
        other => panic!("unknown store {other:?}"),
    }
}

/// Runs this binary as the app process of `store` for `event`; answers it once its handler
/// runs.
///
/// The app process runs only `test` (the calling test's full name), which plays the app
/// process because [`CHILD_STORE`] is set. `--include-ignored` lets it run an ignored test;
/// a name that matches no test makes the app process end at once, and this panic.
fn start_app(test: &str, store: &str, event: &str, marker: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_STORE, store)
        .env("SANGHO_APP_CHILD_EVENT", event)
        .env("SANGHO_APP_CHILD_MARKER", marker)
        .spawn()
        .expect("start the app process");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the app process ended before its handler ran: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "the app process's handler never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Kills the app process mid-handler, then delivers the event through `store` in this
/// process: 409 while the dead process's lease runs, then processed exactly once, then a
/// duplicate. `test` is the calling test, which the app process runs.
async fn killed_app_is_taken_over_once(
    test: &str,
    store: impl IdempotencyStore,
    child_store: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("in-handler");
    let event = unique_event_id("killed");
    let mut child = start_app(test, child_store, &event, &marker);
    common::sigkill(&mut child);
    let killed = Instant::now();

    let handler = CountingHandler::new();
    let service = layer(store).layer(handler.clone());
    let deliver = || {
        send(
            &service,
            Delivery::event(&event, TYPE)
                .signed(&secret(), fixtures::NOW)
                .into_request(),
        )
    };
    let first = deliver().await.status;
    assert_eq!(
        first,
        StatusCode::CONFLICT,
        "the dead process's lease still runs"
    );
    loop {
        let status = deliver().await.status;
        match status {
            StatusCode::OK => break,
            StatusCode::CONFLICT if killed.elapsed() < LEASE * 5 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!(
                "expected a takeover after the lease, got {other} after {:?}",
                killed.elapsed()
            ),
        }
    }
    assert!(
        killed.elapsed() >= LEASE / 2,
        "taken over only once the lease ran out"
    );
    assert_eq!(handler.calls(), 1, "the second process processed it once");
    assert_eq!(deliver().await.status, StatusCode::OK);
    assert_eq!(handler.calls(), 1, "then it is a duplicate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_claim_left_by_a_killed_process_is_taken_over_once_on_postgres() {
    if let Some(store) = app_process_store() {
        return app_process(store).await;
    }
    let store = common::postgres_store("killed", 4).await;
    let child_store = format!("postgres {} {}", common::postgres_url(), store.table());
    killed_app_is_taken_over_once(
        "a_claim_left_by_a_killed_process_is_taken_over_once_on_postgres",
        store.store.clone(),
        &child_store,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_left_by_a_killed_process_is_taken_over_once_on_sqlite() {
    if let Some(store) = app_process_store() {
        return app_process(store).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let store = common::sqlite_store_at(&path, 4).await;
    store.migrate().await.unwrap();
    killed_app_is_taken_over_once(
        "a_claim_left_by_a_killed_process_is_taken_over_once_on_sqlite",
        store,
        &format!("sqlite {}", path.display()),
    )
    .await;
}
