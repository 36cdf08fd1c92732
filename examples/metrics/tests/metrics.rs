//! The metrics example: deliveries of several outcomes, then `GET /metrics` shows them counted.
//!
//! Each test records into its own Prometheus recorder, set as this thread's default (the
//! global recorder can be set only once per process); `#[tokio::test]` runs every task on the
//! test's thread.
//!
//! The process test runs the example's binary, as `cargo run -p sangho-example-metrics` does.

use std::{sync::Arc, time::Duration};

use axum::{Router, routing::post};
use http::{Request, StatusCode, header};
use http_body_util::Full;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use sangho_example_metrics as example;
use sangho_examples_support::testing::{ExampleProcess, SpyStore, layer, peek};
use sangho_webhook::{
    WebhookBody,
    signature::Secret,
    store::MokaStore,
    testing::{
        Delivery,
        fixtures::{self, EVENT_TYPE as TYPE, secret},
        send,
    },
};
use tracing_subscriber::prelude::*;

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_sangho-example-metrics");

fn recorder() -> PrometheusRecorder {
    PrometheusBuilder::new().build_recorder()
}

/// The example's app (the axum example's routes, with metrics) over `store`.
fn app(store: Arc<MokaStore>, recorder: &PrometheusRecorder) -> Router {
    example::with_metrics(sangho_example_axum::app(layer(store)), recorder.handle())
}

fn delivery(id: &str) -> Request<WebhookBody> {
    Delivery::event(id, TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request()
}

/// The body of `GET /metrics`.
async fn scrape(app: &Router) -> String {
    let answer = send(app, Request::get("/metrics").body(Full::default()).unwrap()).await;
    assert_eq!(answer.status, StatusCode::OK);
    String::from_utf8(answer.body.to_vec()).unwrap()
}

/// Every sample of the deliveries counter: its labels and its value.
fn samples(metrics: &str) -> Vec<(String, u64)> {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix(example::DELIVERIES))
        .filter_map(|line| line.rsplit_once(' '))
        .map(|(labels, value)| (labels.to_owned(), value.parse().unwrap()))
        .collect()
}

/// The value of the deliveries counter's sample with exactly these labels, if there is one.
fn sample(metrics: &str, labels: &str) -> Option<u64> {
    value(metrics, example::DELIVERIES, labels).map(|count| count as u64)
}

#[tokio::test]
async fn processed_duplicate_and_in_flight_deliveries_are_counted_by_outcome() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let store = Arc::new(MokaStore::new());
    let app = app(store.clone(), &recorder);

    assert_eq!(send(&app, delivery("evt_m_1")).await.status, 200);
    assert_eq!(send(&app, delivery("evt_m_1")).await.status, 200);
    assert_eq!(send(&app, delivery("evt_m_1")).await.status, 200);
    // Another delivery holds this one's claim.
    peek(&*store, "evt_m_busy").await;
    assert_eq!(send(&app, delivery("evt_m_busy")).await.status, 409);

    let metrics = scrape(&app).await;
    assert_eq!(
        sample(&metrics, r#"outcome="processed""#),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, r#"outcome="duplicate""#),
        Some(2),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, r#"outcome="in_flight""#),
        Some(1),
        "{metrics}"
    );
}

#[tokio::test]
async fn refusals_are_counted_with_their_reason() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let app = app(Arc::new(MokaStore::new()), &recorder);

    let wrong_secret = Delivery::event("evt_m_2", TYPE)
        .signed(&Secret::new("whsec_wrong").unwrap(), fixtures::NOW)
        .into_request();
    assert_eq!(send(&app, wrong_secret).await.status, 400);
    let stale = Delivery::event("evt_m_2", TYPE)
        .signed(&secret(), fixtures::NOW - 3600)
        .into_request();
    assert_eq!(send(&app, stale.clone()).await.status, 400);
    assert_eq!(send(&app, stale).await.status, 400);

    let metrics = scrape(&app).await;
    let refused = |reason: &str| format!(r#"outcome="refused",reason="{reason}""#);
    assert_eq!(
        sample(&metrics, &refused("signature_mismatch")),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, &refused("timestamp_out_of_tolerance")),
        Some(2),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_handler_that_fails_is_counted_as_handler_failed() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let failing = Router::new().route(
        "/webhooks/sangho",
        post(|| async { StatusCode::INTERNAL_SERVER_ERROR }).layer(layer(MokaStore::new())),
    );
    let app = example::with_metrics(failing, recorder.handle());

    assert_eq!(send(&app, delivery("evt_m_3")).await.status, 500);

    let metrics = scrape(&app).await;
    assert_eq!(
        sample(&metrics, r#"outcome="handler_failed""#),
        Some(1),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_provider_that_hangs_up_is_counted_as_hung_up_from_its_log_event() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let _logging = tracing_subscriber::registry()
        .with(example::UnansweredDeliveries::layer())
        .set_default();
    let hanging = Router::new().route(
        "/webhooks/sangho",
        post(std::future::pending::<StatusCode>).layer(layer(MokaStore::new())),
    );
    let app = example::with_metrics(hanging, recorder.handle());

    // The client goes away while the handler runs: the delivery's future is dropped.
    let dropped = tokio::time::timeout(Duration::from_millis(200), send(&app, delivery("evt_m_4")));
    assert!(dropped.await.is_err(), "the handler never answers");

    let metrics = scrape(&app).await;
    assert_eq!(
        sample(&metrics, r#"outcome="hung_up""#),
        Some(1),
        "{metrics}"
    );
}

#[tokio::test]
async fn other_routes_are_not_counted_and_metrics_are_served_as_prometheus_text() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    example::describe();
    let app = app(Arc::new(MokaStore::new()), &recorder);

    let health = Request::get("/health").body(Full::default()).unwrap();
    assert_eq!(send(&app, health).await.status, 200);
    let nowhere = Request::get("/nowhere").body(Full::default()).unwrap();
    assert_eq!(send(&app, nowhere).await.status, 404);
    assert_eq!(send(&app, delivery("evt_m_5")).await.status, 200);

    let answer = send(
        &app,
        Request::get("/metrics").body(Full::default()).unwrap(),
    )
    .await;
    assert_eq!(
        answer.headers[header::CONTENT_TYPE],
        "text/plain; version=0.0.4"
    );
    let metrics = String::from_utf8(answer.body.to_vec()).unwrap();
    assert!(
        metrics.contains(&format!("# TYPE {} counter", example::DELIVERIES)),
        "{metrics}"
    );
    let samples: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with(example::DELIVERIES))
        .collect();
    assert_eq!(
        samples,
        [format!(
            r#"{}{{outcome="processed"}} 1"#,
            example::DELIVERIES
        )],
        "only the delivery is counted"
    );
}

#[tokio::test]
async fn a_get_on_the_webhook_route_answers_405_and_is_not_counted() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let app = app(Arc::new(MokaStore::new()), &recorder);

    let get = Request::get("/webhooks/sangho")
        .body(Full::default())
        .unwrap();
    let answer = send(&app, get).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.headers[header::ALLOW], "POST");

    let metrics = scrape(&app).await;
    assert_eq!(samples(&metrics), [], "{metrics}");
}

/// The example as it runs: the outcome of each response, and the layer's log events counted
/// by [`example::UnansweredDeliveries`].
#[tokio::test]
async fn every_delivery_is_counted_under_exactly_one_outcome() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let _logging = tracing_subscriber::registry()
        .with(example::UnansweredDeliveries::layer())
        .set_default();
    let store = SpyStore::default();
    let app = example::with_metrics(
        sangho_example_axum::app(layer(store.clone())),
        recorder.handle(),
    );

    assert_eq!(send(&app, delivery("evt_m_mix")).await.status, 200);
    assert_eq!(send(&app, delivery("evt_m_mix")).await.status, 200);
    let wrong_secret = Delivery::event("evt_m_mix_2", TYPE)
        .signed(&Secret::new("whsec_wrong").unwrap(), fixtures::NOW)
        .into_request();
    assert_eq!(send(&app, wrong_secret).await.status, 400);
    peek(&*store.inner, "evt_m_mix_busy").await;
    assert_eq!(send(&app, delivery("evt_m_mix_busy")).await.status, 409);
    store.set_down(true);
    assert_eq!(send(&app, delivery("evt_m_mix_3")).await.status, 503);
    store.set_down(false);
    let sent = 5;

    let metrics = scrape(&app).await;
    let mut counted = samples(&metrics);
    counted.sort();
    let expected = [
        (r#"{outcome="duplicate"}"#, 1),
        (r#"{outcome="in_flight"}"#, 1),
        (r#"{outcome="processed"}"#, 1),
        (r#"{outcome="refused",reason="signature_mismatch"}"#, 1),
        (r#"{outcome="store_unavailable"}"#, 1),
    ]
    .map(|(labels, value)| (labels.to_owned(), value));
    assert_eq!(counted, expected, "{metrics}");
    assert_eq!(counted.iter().map(|(_, n)| n).sum::<u64>(), sent);
}

#[tokio::test]
async fn sigterm_stops_the_example_with_exit_status_0() {
    let mut example = ExampleProcess::start(EXAMPLE, &[("SANGHO_STORE_URL", "memory:")]);
    example.wait_listening().await;
    example.signal("TERM");
    let status = example.wait(Duration::from_secs(10)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert!(output.contains("SIGTERM: shutting down"), "{output}");
    assert!(output.contains("stopped: nothing left running"), "{output}");
}

/// Inbox mode's receipt carries its `Outcome` too: the same counter counts it (`stored`,
/// `duplicate`), beside the direct mode's.
#[tokio::test]
async fn inbox_receipts_are_counted_by_outcome() {
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let receiver = sangho_webhook::inbox::InboxReceiver::builder(
        secret(),
        sangho_webhook::inbox::MemoryInbox::new(),
    )
    .with_clock(fixtures::fixed_clock)
    .build()
    .unwrap();
    let inbox_app = Router::new().route_service("/webhooks/sangho", receiver);
    let app = example::with_metrics(inbox_app, recorder.handle());

    assert_eq!(send(&app, delivery("evt_m_inbox")).await.status, 202);
    assert_eq!(send(&app, delivery("evt_m_inbox")).await.status, 200);

    let metrics = scrape(&app).await;
    assert_eq!(
        sample(&metrics, r#"outcome="stored""#),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, r#"outcome="duplicate""#),
        Some(1),
        "{metrics}"
    );
}

/// The value of the sample of `metric` with exactly these labels (none: `""`), if any.
fn value(metrics: &str, metric: &str, labels: &str) -> Option<f64> {
    let prefix = match labels {
        "" => format!("{metric} "),
        labels => format!("{metric}{{{labels}}} "),
    };
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.parse().unwrap())
}

/// Inbox mode's numbers against a known history: one event processed, one that fails and goes
/// dead, then (the workers stopped) the dead one replayed, as `sangho inbox replay` does, and a
/// new one received: the gauges follow the inbox, the counters the worker.
#[tokio::test]
async fn the_inbox_gauges_and_counters_follow_receipts_failures_dead_letters_and_replays() {
    use sangho_webhook::inbox::{
        CachedGauges, EventState, Inbox, InboxReceiver, InboxWorker, MemoryInbox, Replay,
        RetryPolicy,
    };
    let recorder = recorder();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let inbox = MemoryInbox::new();
    let receiver = InboxReceiver::builder(secret(), inbox.clone())
        .with_clock(fixtures::fixed_clock)
        .build()
        .unwrap();
    let handlers = Router::new().route(
        "/webhooks/sangho",
        post(|event: sangho_webhook::SanghoEvent| async move {
            match event.id() {
                "evt_m_fails" => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::OK,
            }
        }),
    );
    let workers = InboxWorker::builder(inbox.clone(), handlers)
        .with_retry_policy(RetryPolicy::default().with_max_attempts(1))
        .build()
        .unwrap()
        .start();
    let gauges = CachedGauges::new(Arc::new(inbox.clone()), Duration::ZERO);
    let numbers = example::InboxNumbers::new(gauges, workers.metrics());
    let inbox_app = Router::new().route_service("/webhooks/sangho", receiver);
    let app = example::with_inbox_metrics(inbox_app, recorder.handle(), numbers);

    for id in ["evt_m_processed", "evt_m_fails"] {
        assert_eq!(send(&app, delivery(id)).await.status, 202);
    }
    let state = |id: &'static str| {
        let inbox = inbox.clone();
        async move {
            inbox
                .show(id)
                .await
                .unwrap()
                .map(|record| record.summary.state)
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while state("evt_m_processed").await != Some(EventState::Completed)
        || state("evt_m_fails").await != Some(EventState::Dead)
    {
        assert!(std::time::Instant::now() < deadline, "not settled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let metrics = scrape(&app).await;
    let events = |state: &str| {
        value(
            &metrics,
            example::INBOX_EVENTS,
            &format!("state=\"{state}\""),
        )
    };
    assert_eq!(
        (events("received"), events("in_flight"), events("dead")),
        (Some(0.0), Some(0.0), Some(1.0)),
        "{metrics}"
    );
    let attempts = |outcome: &str| {
        value(
            &metrics,
            example::INBOX_ATTEMPTS,
            &format!("outcome=\"{outcome}\""),
        )
    };
    assert_eq!(attempts("completed"), Some(1.0), "{metrics}");
    assert_eq!(attempts("failed"), Some(1.0), "{metrics}");
    assert_eq!(
        value(&metrics, example::INBOX_DEAD_LETTERED, ""),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        value(&metrics, example::INBOX_OLDEST_WAITING, ""),
        Some(0.0)
    );

    assert!(workers.shutdown(Duration::from_secs(5)).await);
    let replayed = inbox.replay("evt_m_fails", &Replay::new()).await.unwrap();
    assert_eq!(replayed, sangho_webhook::inbox::Replayed::Replayed);
    assert_eq!(send(&app, delivery("evt_m_new")).await.status, 202);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let metrics = scrape(&app).await;
    let events = |state: &str| {
        value(
            &metrics,
            example::INBOX_EVENTS,
            &format!("state=\"{state}\""),
        )
    };
    assert_eq!(
        (events("received"), events("dead")),
        (Some(2.0), Some(0.0)),
        "{metrics}"
    );
    let oldest = value(&metrics, example::INBOX_OLDEST_WAITING, "").unwrap();
    assert!(oldest > 0.0, "{metrics}");
}
