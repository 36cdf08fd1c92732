//! The axum example with Prometheus metrics: every delivery counted by outcome, served at
//! `GET /metrics`.
//!
//! ```sh
//! cargo run -p sangho-example-metrics
//! curl -s http://127.0.0.1:3000/metrics
//! ```
//!
//! It reads the same variables as the main example (`SANGHO_WEBHOOK_SECRET`,
//! `SANGHO_WEBHOOK_ADDR`, `SANGHO_STORE_URL`) and serves the same routes, plus `/metrics`:
//!
//! ```text
//! sangho_webhook_deliveries_total{outcome="processed"} 1
//! sangho_webhook_deliveries_total{outcome="duplicate"} 4
//! sangho_webhook_deliveries_total{outcome="refused",reason="signature_mismatch"} 1
//! ```
//!
//! The layer puts an [`Outcome`] into every response's extensions; [`count_outcome`], an outer
//! `map_response`, counts it: `processed`, `completion_failed`, `taken_over`, `duplicate`,
//! `in_flight`, `refused` (with its `reason`, the refusal's code), `store_unavailable`,
//! `handler_failed`.
//!
//! Two endings have no response to carry an outcome: a provider that hung up before the answer
//! (its handler keeps running, and its answer settles the event) and a handler that returned an
//! `Err` (not possible with axum handlers, whose errors are responses). The layer logs both at
//! `warn` with a field `outcome` = `hung_up` / `handler_error`; [`UnansweredDeliveries`], a
//! `tracing` layer, counts those events under the same metric. So every delivery is counted
//! once, under one outcome.
//!
//! Inbox mode adds the numbers an operator alerts on ([`with_inbox_metrics`]), read when
//! `/metrics` is scraped: the inbox's gauges per database (from its indexes, at most every
//! 5 s), and this process's worker counters:
//!
//! ```text
//! sangho_inbox_events{state="received"} 3
//! sangho_inbox_events{state="in_flight"} 4
//! sangho_inbox_events{state="dead"} 1
//! sangho_inbox_oldest_waiting_seconds 0.2
//! sangho_inbox_attempts_total{outcome="completed"} 1520
//! sangho_inbox_attempts_total{outcome="failed"} 12
//! sangho_inbox_dead_lettered_total 1
//! ```
//!
//! Alert on `sangho_inbox_oldest_waiting_seconds` (no worker runs, or the workers cannot keep
//! up), on `sangho_inbox_events{state="dead"}`, and on the rate of failed attempts. Replays are
//! counted by whoever replays (the `sangho inbox replay` command prints and logs each); a
//! replay shows here as a dead event waiting again.
//!
//! Why `metrics` and `metrics-exporter-prometheus` rather than OpenTelemetry: two small crates
//! from one actively maintained repository with a stable facade (`counter!`), no collector or
//! SDK pipeline to set up, and the Prometheus text format rendered in-process. With
//! `default-features = false` the exporter brings no HTTP listener of its own: the app serves
//! `/metrics` itself, on its own port and behind its own middleware. (OpenTelemetry fits when
//! traces and metrics go to an OTLP collector; its Rust crates still change their API between
//! minor versions.)

use axum::{
    Router,
    http::header,
    middleware::map_response,
    response::{IntoResponse, Response},
    routing::get,
};
use metrics::{Unit, counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::PrometheusHandle;
use sangho_webhook::{
    Outcome,
    inbox::{AttemptOutcome, CachedGauges, WorkerMetrics},
};
use tracing::{
    Level, Subscriber,
    field::{Field, Visit},
};
use tracing_subscriber::{Layer, filter::Targets, layer::Context};

/// The counter of deliveries, labelled by `outcome` (and `reason`, for refusals).
pub const DELIVERIES: &str = "sangho_webhook_deliveries_total";

/// The inbox's events, labelled by `state` (`received`, `in_flight`, `dead`).
pub const INBOX_EVENTS: &str = "sangho_inbox_events";
/// How long the oldest event due now has waited since its receipt (0 when none waits).
pub const INBOX_OLDEST_WAITING: &str = "sangho_inbox_oldest_waiting_seconds";
/// This process's attempts at inbox events, labelled by `outcome`.
pub const INBOX_ATTEMPTS: &str = "sangho_inbox_attempts_total";
/// The events this process's workers made dead.
pub const INBOX_DEAD_LETTERED: &str = "sangho_inbox_dead_lettered_total";

/// Describes the metrics to the installed recorder (Prometheus's `# HELP` and `# TYPE`).
pub fn describe() {
    describe_counter!(
        DELIVERIES,
        Unit::Count,
        "Sangho webhook deliveries, by outcome (and reason, for refusals)"
    );
    describe_gauge!(
        INBOX_EVENTS,
        Unit::Count,
        "Inbox events waiting, in flight and dead"
    );
    describe_gauge!(
        INBOX_OLDEST_WAITING,
        Unit::Seconds,
        "How long the oldest waiting inbox event has waited"
    );
    describe_counter!(
        INBOX_ATTEMPTS,
        Unit::Count,
        "Attempts at inbox events in this process, by outcome"
    );
    describe_counter!(
        INBOX_DEAD_LETTERED,
        Unit::Count,
        "Inbox events this process's workers made dead"
    );
}

/// What [`with_inbox_metrics`] reads at each scrape: the inbox's gauges and a worker's
/// counters.
#[derive(Debug, Clone)]
pub struct InboxNumbers {
    gauges: CachedGauges,
    workers: WorkerMetrics,
}

impl InboxNumbers {
    /// The numbers of `gauges` (an inbox's, cached) and of `workers`.
    pub fn new(gauges: CachedGauges, workers: WorkerMetrics) -> Self {
        Self { gauges, workers }
    }

    /// Sets the gauges and counters to what the inbox and the worker say now.
    async fn record(&self) {
        match self.gauges.get().await {
            Ok(gauges) => {
                let states = [
                    ("received", gauges.received),
                    ("in_flight", gauges.in_flight),
                    ("dead", gauges.dead),
                ];
                for (state, events) in states {
                    gauge!(INBOX_EVENTS, "state" => state).set(events as f64);
                }
                let oldest = gauges.oldest_waiting.unwrap_or_default();
                gauge!(INBOX_OLDEST_WAITING).set(oldest.as_secs_f64());
            }
            // The gauges keep their last values; the failure is in the log.
            Err(error) => tracing::error!(%error, "the inbox's gauges cannot be read"),
        }
        for outcome in AttemptOutcome::ALL {
            let attempts = self.workers.attempts(outcome);
            counter!(INBOX_ATTEMPTS, "outcome" => outcome.as_str()).absolute(attempts);
        }
        counter!(INBOX_DEAD_LETTERED).absolute(self.workers.dead_lettered());
    }
}

/// [`with_metrics`], whose `/metrics` also reads the inbox's numbers at each scrape.
pub fn with_inbox_metrics(app: Router, metrics: PrometheusHandle, inbox: InboxNumbers) -> Router {
    let scrape = move || {
        let (metrics, inbox) = (metrics.clone(), inbox.clone());
        async move {
            inbox.record().await;
            render(&metrics)
        }
    };
    app.route("/metrics", get(scrape))
        .layer(map_response(count_outcome))
}

/// `app` with `GET /metrics` and the outcome counter around every route.
pub fn with_metrics(app: Router, metrics: PrometheusHandle) -> Router {
    app.route(
        "/metrics",
        get(move || std::future::ready(render(&metrics))),
    )
    .layer(map_response(count_outcome))
}

/// Counts the delivery a response answers, if it carries an [`Outcome`] (other routes' do not).
pub async fn count_outcome(response: Response) -> Response {
    match response.extensions().get::<Outcome>() {
        // Refusals by reason; a 409 and a 503 have codes of their own, `in_flight` and
        // `store_unavailable`.
        Some(&outcome @ Outcome::Refused(kind)) if outcome.code() == "refused" => {
            counter!(DELIVERIES, "outcome" => "refused", "reason" => kind.code()).increment(1);
        }
        Some(outcome) => counter!(DELIVERIES, "outcome" => outcome.code()).increment(1),
        None => {}
    }
    response
}

fn render(metrics: &PrometheusHandle) -> impl IntoResponse + use<> {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
}

/// Counts the deliveries that ended without a response (`outcome` = `hung_up` or
/// `handler_error` in the layer's `warn` events) under [`DELIVERIES`].
#[derive(Debug)]
pub struct UnansweredDeliveries;

impl UnansweredDeliveries {
    /// The layer, listening to the webhook layer's `warn` and `error` events only, whatever
    /// the log filter lets through.
    pub fn layer<S>() -> impl Layer<S>
    where
        S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        Self.with_filter(Targets::new().with_target("sangho_webhook", Level::WARN))
    }
}

impl<S: Subscriber> Layer<S> for UnansweredDeliveries {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut outcome = OutcomeField(None);
        event.record(&mut outcome);
        if let Some(outcome) = outcome.0 {
            counter!(DELIVERIES, "outcome" => outcome).increment(1);
        }
    }
}

/// The event's `outcome` field, when it names an ending without a response.
struct OutcomeField(Option<&'static str>);

impl Visit for OutcomeField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "outcome" {
            self.0 = match value {
                "hung_up" => Some("hung_up"),
                "handler_error" => Some("handler_error"),
                _ => None,
            };
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}
