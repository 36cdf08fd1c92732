//! New events before retries: a backlog of a thousand failing events, all due for their retry,
//! never delays a newly received event by more than one handler run (PostgreSQL and SQLite),
//! with the worker's default take order; in strict receipt order the new event waits behind
//! the whole backlog.
//!
//! The PostgreSQL test is ignored by default (run with `--include-ignored`, against
//! `SANGHO_TEST_POSTGRES_URL`).

mod common;

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sangho_webhook::{
    SanghoEvent, WebhookBody,
    inbox::{FailedAttempt, Inbox, InboxWorker, NextAttempt, ReceivedEvent, TakeOrder},
    store::ClaimToken,
    testing::{conformance::unique_event_id, fixtures},
};

/// The failing events waiting for their retry.
const BACKLOG: usize = 1000;
/// How long the handler takes on each event of the backlog (then it answers 500).
const RUN: Duration = Duration::from_millis(100);
const FRESH_TYPE: &str = "payment_intent.succeeded";
const FAILING_TYPE: &str = "invoice.sync_failed";

async fn receive(inbox: &impl Inbox, id: &str, event_type: &str) {
    let body = bytes::Bytes::from(fixtures::event_body(id, event_type));
    let event = ReceivedEvent::new(id, event_type, &body, &[], "/webhooks/sangho");
    inbox.receive(&event).await.unwrap();
}

/// A backlog of [`BACKLOG`] events that each failed once and are due again, then a worker of
/// four whose handler fails each of them after [`RUN`], then a new event: how long after its
/// receipt the handler starts on it, with the worker taking in `order`.
async fn fresh_event_latency<I: Inbox + Clone>(inbox: I, order: TakeOrder) -> Duration {
    for n in 0..BACKLOG {
        receive(
            &inbox,
            &format!("{}_{n}", unique_event_id("backlog")),
            FAILING_TYPE,
        )
        .await;
    }
    let now = FailedAttempt::new("status 500", NextAttempt::After(Duration::ZERO));
    // New events first: each event of the backlog is taken and fails once, then the first
    // retry comes up.
    let token = ClaimToken::generate();
    while let Some(taken) = inbox
        .take(&token, Duration::from_secs(60), TakeOrder::FreshFirst)
        .await
        .unwrap()
    {
        if taken.attempt > 1 {
            // Every event of the backlog has failed once: this one is its first retry.
            inbox.abandon(&taken.claimant()).await.unwrap();
            break;
        }
        inbox.fail(&taken.claimant(), &now).await.unwrap();
    }

    let fresh_started: Arc<Mutex<Option<Instant>>> = Arc::default();
    let started = fresh_started.clone();
    let handler = tower::service_fn(move |request: http::Request<WebhookBody>| {
        let started = started.clone();
        async move {
            let event = request.extensions().get::<SanghoEvent>().unwrap();
            let status = if event.event_type() == FRESH_TYPE {
                started.lock().unwrap().get_or_insert_with(Instant::now);
                200
            } else {
                tokio::time::sleep(RUN).await;
                500
            };
            let mut response = http::Response::new(WebhookBody::from_static(b""));
            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    let worker = InboxWorker::builder(inbox.clone(), handler)
        .with_concurrency(4)
        .with_take_order(order)
        .build()
        .unwrap()
        .start();
    // Every worker is busy with the backlog's retries.
    tokio::time::sleep(RUN * 3 / 2).await;
    receive(&inbox, &unique_event_id("fresh"), FRESH_TYPE).await;
    let received = Instant::now();
    let limit = Duration::from_secs(2);
    let latency = loop {
        if let Some(at) = *fresh_started.lock().unwrap() {
            break at.saturating_duration_since(received);
        }
        if received.elapsed() > limit {
            break limit;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    worker.shutdown(Duration::from_secs(5)).await;
    latency
}

/// The new event starts within one handler run of the backlog (plus a take's margin).
fn assert_within_one_run(latency: Duration, store: &str) {
    eprintln!("{store}: a new event behind {BACKLOG} due retries started after {latency:?}");
    assert!(
        latency <= RUN + Duration::from_millis(150),
        "{store}: the new event waited {latency:?} behind the retries (one run is {RUN:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_backlog_of_retries_never_delays_a_new_event_by_more_than_one_run() {
    let store = common::postgres_store("fairness", 8).await;
    let latency = fresh_event_latency(store.store.clone(), TakeOrder::FreshFirst).await;
    assert_within_one_run(latency, "postgres");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_retries_never_delays_a_new_event_by_more_than_one_run_on_sqlite() {
    let store = common::sqlite_store(8).await;
    let latency = fresh_event_latency(store.store.clone(), TakeOrder::FreshFirst).await;
    assert_within_one_run(latency, "sqlite");
}

/// In strict receipt order, the same new event waits behind the backlog's retries: what the
/// default order prevents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_receipt_order_a_new_event_waits_behind_the_retries() {
    let store = common::sqlite_store(8).await;
    let latency = fresh_event_latency(store.store.clone(), TakeOrder::Receipt).await;
    eprintln!("sqlite, receipt order: the new event started after {latency:?}");
    assert!(latency > RUN * 5, "{latency:?}");
}
