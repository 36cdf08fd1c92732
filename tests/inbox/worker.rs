//! The worker: one handler run per event, retries at the backoff's times, dead letters and
//! replays, panics, slow handlers, shutdown, store outages, and the handlers it may call.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use http::StatusCode;
use sangho_webhook::{
    SanghoEvent, SanghoWebhookLayer,
    inbox::{EventState, Inbox, InboxWorker, MemoryInbox, Replay, RetryPolicy},
    store::MokaStore,
    testing::{conformance::unique_event_id, send},
};

use crate::support::{Act, FaultyInbox, Scripted, delivery, receive, receiver, wait_until};

const LIMIT: Duration = Duration::from_secs(10);

async fn state(inbox: &dyn Inbox, id: &str) -> Option<EventState> {
    inbox
        .show(id)
        .await
        .unwrap()
        .map(|record| record.summary.state)
}

async fn wait_for_state(inbox: &MemoryInbox, id: &str, wanted: EventState) {
    let deadline = Instant::now() + LIMIT;
    while state(inbox, id).await != Some(wanted) {
        assert!(Instant::now() < deadline, "{id} never became {wanted}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_received_event_is_handled_once_with_the_direct_modes_request() {
    let inbox = MemoryInbox::new();
    let handler = Scripted::ok();
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("once");
    let delivery = delivery(&id).with_uri("/hooks/sangho?token=x");
    let body = delivery.body_bytes().clone();
    assert_eq!(
        send(&receiver(inbox.clone()), delivery.into_request())
            .await
            .status,
        202
    );

    wait_for_state(&inbox, &id, EventState::Completed).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = handler.calls();
    assert_eq!(calls.len(), 1, "handled once");
    let call = &calls[0];
    assert_eq!(call.method, http::Method::POST);
    assert_eq!(
        call.path, "/hooks/sangho",
        "the path it was received on (no query)"
    );
    assert_eq!(call.body, body);
    assert!(call.headers.contains_key("sangho-signature"));
    assert_eq!(call.attempt, 1);
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_starts_a_new_event_within_milliseconds() {
    let inbox = MemoryInbox::new();
    let handler = Scripted::ok();
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .with_poll_interval(Duration::from_secs(30))
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_millis(100)).await; // every task is idle, waiting
    let mut latencies = Vec::new();
    for n in 0..20 {
        let received = Instant::now();
        receive(&inbox, &unique_event_id("wake")).await;
        wait_until(LIMIT, "the handler starts", || handler.calls().len() > n).await;
        latencies.push(handler.calls()[n].at - received);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    latencies.sort();
    let worst = *latencies.last().unwrap();
    assert!(
        worst < Duration::from_millis(500),
        "woken by the receipt, not the 30 s poll: {latencies:?}"
    );
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_is_retried_at_the_backoffs_times_then_succeeds() {
    let inbox = MemoryInbox::new();
    let handler = Scripted::new(|_, attempt| {
        Act::Answer(if attempt <= 3 {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        })
    });
    let policy = RetryPolicy::default()
        .with_first_delay(Duration::from_millis(400))
        .with_max_delay(Duration::from_secs(1));
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .with_retry_policy(policy)
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("retry");
    receive(&inbox, &id).await;
    wait_for_state(&inbox, &id, EventState::Completed).await;

    let calls = handler.calls();
    let attempts: Vec<u32> = calls.iter().map(|call| call.attempt).collect();
    assert_eq!(attempts, [1, 2, 3, 4]);
    for (n, pair) in calls.windows(2).enumerate() {
        let waited = pair[1].at - pair[0].at;
        let bound = policy.delay_bound(n as u32 + 1);
        assert!(
            waited >= bound / 2,
            "attempt {} came after {waited:?}, under half of {bound:?}",
            n + 2
        );
        assert!(
            waited <= bound + Duration::from_millis(300),
            "attempt {} came after {waited:?}",
            n + 2
        );
    }
    let record = inbox.show(&id).await.unwrap().unwrap();
    let failures = record
        .history
        .iter()
        .filter(|line| line.contains("status 500: scripted answer"));
    assert_eq!(failures.count(), 3, "{:?}", record.history);
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_always_failing_event_goes_dead_and_a_replay_processes_it_once() {
    let inbox = MemoryInbox::new();
    let fixed = Arc::new(AtomicBool::new(false));
    let handler = Scripted::new({
        let fixed = fixed.clone();
        move |_, _| {
            Act::Answer(if fixed.load(Ordering::SeqCst) {
                StatusCode::OK
            } else {
                StatusCode::BAD_GATEWAY
            })
        }
    });
    let policy = RetryPolicy::default()
        .with_first_delay(Duration::from_millis(20))
        .with_max_attempts(3);
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .with_retry_policy(policy)
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("dead");
    receive(&inbox, &id).await;
    wait_for_state(&inbox, &id, EventState::Dead).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        handler.calls().len(),
        3,
        "dead after the limit, and never retried by itself"
    );
    let record = inbox.show(&id).await.unwrap().unwrap();
    assert_eq!(
        record.summary.last_error.as_deref(),
        Some("status 502: scripted answer")
    );

    fixed.store(true, Ordering::SeqCst);
    let replayed = inbox
        .replay(&id, &Replay::new().with_reason("fixed"))
        .await
        .unwrap();
    assert_eq!(replayed, sangho_webhook::inbox::Replayed::Replayed);
    wait_for_state(&inbox, &id, EventState::Completed).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(handler.calls().len(), 4, "processed once after the replay");
    assert_eq!(handler.calls()[3].attempt, 1, "a fresh attempt budget");
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_does_not_stop_the_worker() {
    let inbox = MemoryInbox::new();
    let first = unique_event_id("panics");
    let second = unique_event_id("after");
    let handler = Scripted::new({
        let first = first.clone();
        move |id, _| {
            if id == first {
                Act::Panic
            } else {
                Act::Answer(StatusCode::OK)
            }
        }
    });
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .with_concurrency(1)
        .with_retry_policy(RetryPolicy::default().with_max_attempts(1))
        .build()
        .unwrap()
        .start();
    receive(&inbox, &first).await;
    receive(&inbox, &second).await;
    wait_for_state(&inbox, &second, EventState::Completed).await;
    let record = inbox.show(&first).await.unwrap().unwrap();
    assert_eq!(record.summary.state, EventState::Dead);
    let error = record.summary.last_error.unwrap();
    assert!(
        error.contains("panicked: the scripted handler panics"),
        "{error}"
    );
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_ten_times_the_lease_runs_once_and_redeliveries_are_duplicates() {
    let inbox = MemoryInbox::new();
    let lease = Duration::from_secs(1);
    let handler = Scripted::new(move |_, _| Act::Sleep(10 * lease));
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .with_lease(lease)
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("slow");
    let service = receiver(inbox.clone());
    assert_eq!(
        send(&service, delivery(&id).into_request()).await.status,
        202
    );
    let started = Instant::now();
    while started.elapsed() < 9 * lease {
        let answer = send(&service, delivery(&id).into_request()).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "a duplicate while the handler runs"
        );
        tokio::time::sleep(lease / 2).await;
    }
    wait_for_state(&inbox, &id, EventState::Completed).await;
    assert_eq!(
        handler.calls().len(),
        1,
        "the renewed lease was never taken over"
    );
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_handlers_finish_within_the_deadline() {
    let inbox = MemoryInbox::new();
    let handler = Scripted::new(|_, _| Act::Sleep(Duration::from_millis(500)));
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("finish");
    receive(&inbox, &id).await;
    wait_until(LIMIT, "the handler starts", || !handler.calls().is_empty()).await;
    assert!(worker.shutdown(LIMIT).await, "finished within the deadline");
    assert_eq!(state(&inbox, &id).await, Some(EventState::Completed));
    let later = unique_event_id("later");
    receive(&inbox, &later).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        state(&inbox, &later).await,
        Some(EventState::Received),
        "no takes after the shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_abandons_what_outlives_the_deadline_without_counting_the_attempt() {
    let inbox = MemoryInbox::new();
    let handler = Scripted::new(|_, _| Act::Sleep(Duration::from_secs(60)));
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("abandon");
    receive(&inbox, &id).await;
    wait_until(LIMIT, "the handler starts", || !handler.calls().is_empty()).await;
    let started = Instant::now();
    assert!(
        !worker.shutdown(Duration::from_millis(200)).await,
        "the handler outlived the deadline"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let record = inbox.show(&id).await.unwrap().unwrap();
    assert_eq!(
        record.summary.state,
        EventState::Received,
        "due again at once"
    );
    assert_eq!(
        record.summary.attempts, 0,
        "the abandoned attempt does not count"
    );

    let next = Scripted::ok();
    let worker = InboxWorker::builder(inbox.clone(), next.clone())
        .build()
        .unwrap()
        .start();
    wait_for_state(&inbox, &id, EventState::Completed).await;
    assert_eq!(next.calls()[0].attempt, 1);
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_makes_the_worker_back_off_and_resume_by_itself() {
    let inbox = FaultyInbox::default();
    inbox.down.store(true, Ordering::SeqCst);
    let handler = Scripted::ok();
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .with_concurrency(2)
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let takes = inbox.takes.load(Ordering::SeqCst);
    // Two tasks backing off from 100 ms, doubling: about six takes each in 3 s.
    assert!(takes <= 20, "{takes} takes in 3 s: a hot loop");
    inbox.down.store(false, Ordering::SeqCst);
    let id = unique_event_id("resume");
    receive(&inbox.inner, &id).await;
    wait_until(LIMIT, "the worker resumes", || handler.calls().len() == 1).await;
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_takes_its_next_event_while_the_last_ones_completion_is_written() {
    // Each completion is held until a take begins after it: a task that took its next event
    // only once its completion was written would wait 5 s per event.
    let inbox = FaultyInbox {
        completions_wait_for_a_take: true,
        ..FaultyInbox::default()
    };
    let ids: Vec<String> = (0..3).map(|_| unique_event_id("overlap")).collect();
    for id in &ids {
        receive(&inbox.inner, id).await;
    }
    let handler = Scripted::ok();
    let started = Instant::now();
    let worker = InboxWorker::builder(inbox.clone(), handler.clone())
        .with_concurrency(1)
        .build()
        .unwrap()
        .start();
    for id in &ids {
        wait_for_state(&inbox.inner, id, EventState::Completed).await;
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(3),
        "three events in {elapsed:?}: each completion waited for the next take"
    );
    assert_eq!(handler.calls().len(), 3);
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_request_that_reaches_the_webhook_layer_is_refused() {
    let inbox = MemoryInbox::new();
    let handler = Scripted::ok();
    let layered = tower::Layer::layer(
        &SanghoWebhookLayer::new(crate::support::secret(), MokaStore::new()),
        handler.clone(),
    );
    let worker = InboxWorker::builder(inbox.clone(), layered)
        .with_retry_policy(RetryPolicy::default().with_max_attempts(1))
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("layered");
    receive(&inbox, &id).await;
    wait_for_state(&inbox, &id, EventState::Dead).await;
    assert!(
        handler.calls().is_empty(),
        "the handler behind the layer is never called"
    );
    let error = inbox
        .show(&id)
        .await
        .unwrap()
        .unwrap()
        .summary
        .last_error
        .unwrap();
    assert!(
        error.contains("status 500") && error.contains("inbox_worker_request"),
        "{error}"
    );
    assert!(worker.shutdown(LIMIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_axum_router_of_handlers_serves_as_the_worker() {
    use axum::{Router, routing::post};
    let inbox = MemoryInbox::new();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let router: Router = Router::new().route(
        "/webhooks/sangho",
        post({
            let seen = seen.clone();
            move |event: SanghoEvent| async move {
                seen.lock().unwrap().push(event.id().to_owned());
                "ok"
            }
        }),
    );
    let worker = InboxWorker::builder(inbox.clone(), router)
        .with_retry_policy(RetryPolicy::default().with_max_attempts(1))
        .build()
        .unwrap()
        .start();
    let id = unique_event_id("axum");
    receive(&inbox, &id).await;
    wait_for_state(&inbox, &id, EventState::Completed).await;
    assert_eq!(*seen.lock().unwrap(), [id]);
    assert!(worker.shutdown(LIMIT).await);
}
