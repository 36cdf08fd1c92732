//! A process killed (SIGKILL) while its handler runs: its claim stays in Redis until the lease
//! runs out, and then another process takes the event over and processes it once.
//!
//! The killed process is this test binary itself, running the same test again with
//! [`CHILD_URL`] set: that test then acts as the child ([`hold_a_claim`]), delivering the
//! event to its own layer and reporting when its handler runs.

mod common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use common::{
    RedisServer,
    deliver::{deliver, service},
};
use http::StatusCode;
use sangho_webhook::testing::{CountingHandler, conformance::unique_event_id};
use sangho_webhook_redis::RedisStore;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The Redis of the child process; set only in the child.
const CHILD_URL: &str = "SANGHO_TEST_CRASH_CHILD_REDIS_URL";
/// The event the child delivers.
const CHILD_EVENT: &str = "SANGHO_TEST_CRASH_CHILD_EVENT";
/// What the child prints once its handler runs.
const IN_HANDLER: &str = "sangho-crash-child: in the handler";
/// The lease of both processes.
const LEASE: Duration = Duration::from_secs(2);

/// The child's part: delivers the event of [`CHILD_EVENT`] to a layer whose handler never
/// finishes, and prints [`IN_HANDLER`] once the handler runs. The parent kills it there.
async fn hold_a_claim(url: String) {
    let id = std::env::var(CHILD_EVENT).expect("the parent names the event");
    let store = RedisStore::connect(url).await.expect("the parent's Redis");
    let handler = CountingHandler::new().with_delay(Duration::from_secs(600));
    let service = service(store, &handler, |layer| layer.with_lease(LEASE));
    tokio::spawn({
        let handler = handler.clone();
        async move {
            while handler.calls() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            println!("{IN_HANDLER}");
        }
    });
    deliver(&service, &id).await;
    unreachable!("the parent kills this process while the handler runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_claim_left_by_a_killed_process_is_taken_over_after_its_lease() {
    if let Ok(url) = std::env::var(CHILD_URL) {
        return hold_a_claim(url).await;
    }
    let server = RedisServer::start().await;
    let id = unique_event_id("killed");
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("this binary"))
        .args([
            "--exact",
            "a_claim_left_by_a_killed_process_is_taken_over_after_its_lease",
            "--include-ignored",
            "--nocapture",
        ])
        .env(CHILD_URL, server.url())
        .env(CHILD_EVENT, &id)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the child process");
    let mut lines = BufReader::new(child.stdout.take().expect("the child's stdout")).lines();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read the child's stdout") {
            if line.contains(IN_HANDLER) {
                return;
            }
        }
        panic!("the child exited before its handler ran");
    })
    .await
    .expect("the child's handler runs within 30 s");

    child.start_kill().expect("SIGKILL the child");
    let status = child.wait().await.expect("the child is gone");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the child was still running when killed: {status}"
    );
    let killed = Instant::now();

    // Another process (here: this one, with its own connection and layer) gets the
    // redeliveries: 409 while the dead process's lease runs, then the event is processed once.
    let store = RedisStore::connect(server.url()).await.unwrap();
    let handler = CountingHandler::new();
    let service = service(store, &handler, |layer| layer.with_lease(LEASE));
    let mut conflicts = 0;
    let taken_over = loop {
        let (status, _) = deliver(&service, &id).await;
        match status {
            StatusCode::OK => break killed.elapsed(),
            StatusCode::CONFLICT => conflicts += 1,
            other => panic!("a redelivery answered {other}"),
        }
        assert!(
            killed.elapsed() < LEASE * 5,
            "not taken over {:?} after the kill",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "kill -9 mid-handler: taken over {taken_over:?} after the kill (lease {LEASE:?}), \
         {conflicts} redeliveries answered 409 before"
    );
    assert!(
        conflicts > 0,
        "the dead process's claim held the event first"
    );
    assert!(
        taken_over <= LEASE + Duration::from_secs(1),
        "{taken_over:?}"
    );
    assert_eq!(handler.calls(), 1, "the event is processed once");
    assert_eq!(deliver(&service, &id).await.0, StatusCode::OK);
    assert_eq!(handler.calls(), 1, "and its redelivery is a duplicate");
}
