//! `sangho send`: sends signed test events to a webhook endpoint, as Sangho does, for trying an
//! endpoint that is running, here or deployed.
//!
//! ```sh
//! export SANGHO_WEBHOOK_SECRET=whsec_…   # the endpoint's secret
//! cargo run -p sangho-tools -- send --url http://127.0.0.1:3000/webhooks/sangho
//! cargo run -p sangho-tools -- send --url URL --repeat 20 --concurrency 5   # deduplication at work
//! cargo run -p sangho-tools -- send --url URL --stale 3600                  # the replay refusal
//! ```
//!
//! | option | default | meaning |
//! | --- | --- | --- |
//! | `--url URL` | (required) | the endpoint, `http://` or `https://` |
//! | `--id ID` | a fresh `evt_test_…` | the event id |
//! | `--type TYPE` | `payment_intent.succeeded` | the event type |
//! | `--data JSON` | `{}` | the event's `data.object` |
//! | `--repeat N` | 1 | deliveries of the same event |
//! | `--concurrency N` | 1 | deliveries in flight at once |
//! | `--stale SECONDS` | | sign with a timestamp this old, to see the replay refusal |
//! | `--secret SECRET` | `SANGHO_WEBHOOK_SECRET` | for throwaway secrets only (below) |
//!
//! The secret comes from `SANGHO_WEBHOOK_SECRET`, so that it stays out of the shell's history
//! and the process list. `--secret` overrides it: a command-line flag is visible to every user
//! of the machine, so keep it for development secrets.
//!
//! Each delivery is the same event, signed at the time it is sent (`t=<now>,v1=<hex>`, as the
//! provider signs), and prints one line: its number, the status, the outcome read from the
//! answer (`processed`, `duplicate`, or the `error` code of a refusal: `in_flight`,
//! `signature_mismatch`…) and the latency. The exit status is 0 when every delivery was
//! accepted: a 2xx, or a 409 because another delivery of the event was in flight. With
//! `--stale`, the expected refusal (400 `timestamp_out_of_tolerance`) is the success. Anything
//! else (a refusal, a 5xx, a connection error, no answer within 30 s) exits 1; a bad command
//! line or secret exits 2.

use std::{
    error::Error,
    fmt,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use clap::Parser;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_tls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use sangho_webhook::{EVENT_ID_HEADER, SIGNATURE_HEADER, signature::Secret};
use serde::Serialize;
use serde_json::Value;

/// How long one delivery may take before it counts as failed.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// The `api_version` of the events sent.
const API_VERSION: &str = "2026-01-01";

/// The command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "send",
    about = "Sends signed Sangho test events to a webhook endpoint and reports each answer"
)]
pub struct Args {
    /// The webhook endpoint, http:// or https://
    #[arg(long, value_name = "URL", value_parser = parse_url)]
    pub url: Uri,
    /// The endpoint secret. Prefer the environment variable: a flag shows in the shell's
    /// history and the process list, so use it for throwaway secrets only
    #[arg(
        long,
        value_name = "SECRET",
        env = "SANGHO_WEBHOOK_SECRET",
        hide_env_values = true
    )]
    pub secret: String,
    /// The event id [default: a fresh evt_test_…]
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// The event type
    #[arg(
        long = "type",
        value_name = "TYPE",
        default_value = "payment_intent.succeeded"
    )]
    pub event_type: String,
    /// The event's data.object, as JSON
    #[arg(long, value_name = "JSON", default_value = "{}", value_parser = parse_json)]
    pub data: Value,
    /// How many times to deliver the same event
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// How many deliveries to keep in flight at once
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// Sign with a timestamp this many seconds old: the endpoint should refuse it as a replay
    /// (400 timestamp_out_of_tolerance), which then counts as success
    #[arg(long, value_name = "SECONDS")]
    pub stale: Option<u64>,
}

impl Args {
    /// The same arguments with an event id: the given one, or a fresh `evt_test_…`.
    #[must_use]
    pub fn with_event_id(mut self) -> Self {
        if self.id.is_none() {
            self.id = Some(fresh_event_id());
        }
        self
    }
}

fn parse_url(url: &str) -> Result<Uri, String> {
    let uri: Uri = url.parse().map_err(|error| format!("{error}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(uri),
        _ => Err("expected an http:// or https:// URL with a host".to_owned()),
    }
}

fn parse_json(json: &str) -> Result<Value, String> {
    serde_json::from_str(json).map_err(|error| format!("not JSON: {error}"))
}

/// `evt_test_` and 24 random hex digits.
fn fresh_event_id() -> String {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("evt_test_{hex}")
}

/// The event as the provider sends it, fields in the provider's order.
#[derive(Serialize)]
struct EventBody<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    created: i64,
    livemode: bool,
    api_version: &'a str,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    object: &'a Value,
}

/// One delivery and its answer.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Its number, from 1, in the order the deliveries started.
    pub number: u32,
    /// The answer's status; `None` when there was no answer (connection error, timeout).
    pub status: Option<StatusCode>,
    /// What the answer says: `processed`, `duplicate`, `accepted` (another 2xx), the `error`
    /// code of a refusal (`in_flight`, `signature_mismatch`…), or why there was no answer.
    pub outcome: String,
    /// From sending the request to the whole answer.
    pub latency: Duration,
}

impl Sent {
    /// Whether this answer is the expected one: accepted (2xx, or 409 while another delivery
    /// of the event is in flight) or, for a stale delivery, refused as a replay.
    pub fn is_expected(&self, stale: bool) -> bool {
        match self.status {
            None => false,
            Some(status) if stale => {
                status == StatusCode::BAD_REQUEST && self.outcome == "timestamp_out_of_tolerance"
            }
            Some(status) => status.is_success() || status == StatusCode::CONFLICT,
        }
    }
}

impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self
            .status
            .map_or_else(|| "---".to_owned(), |status| status.as_u16().to_string());
        write!(
            f,
            "#{:<4} {status} {:<28} {:>9.1} ms",
            self.number,
            self.outcome,
            self.latency.as_secs_f64() * 1000.0
        )
    }
}

/// Every delivery of one run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The event id delivered.
    pub event_id: String,
    /// Whether the deliveries were signed stale (`--stale`).
    pub stale: bool,
    /// The deliveries, in the order their answers came.
    pub deliveries: Vec<Sent>,
}

impl Report {
    /// Whether every delivery got the expected answer (see [`Sent::is_expected`]).
    pub fn is_success(&self) -> bool {
        !self.deliveries.is_empty()
            && self
                .deliveries
                .iter()
                .all(|sent| sent.is_expected(self.stale))
    }

    /// How many deliveries had this outcome.
    pub fn count(&self, outcome: &str) -> usize {
        self.deliveries
            .iter()
            .filter(|sent| sent.outcome == outcome)
            .count()
    }

    /// The closing line: the outcomes counted, and the verdict.
    pub fn summary(&self) -> String {
        let mut outcomes: Vec<&str> = self.deliveries.iter().map(|s| s.outcome.as_str()).collect();
        outcomes.sort_unstable();
        outcomes.dedup();
        let counts: Vec<String> = outcomes
            .iter()
            .map(|outcome| format!("{} {outcome}", self.count(outcome)))
            .collect();
        let verdict = match (self.is_success(), self.stale) {
            (true, false) => "every delivery accepted".to_owned(),
            (true, true) => "every stale delivery refused as a replay, as expected".to_owned(),
            (false, _) => {
                let unexpected = self
                    .deliveries
                    .iter()
                    .filter(|sent| !sent.is_expected(self.stale))
                    .count();
                format!("FAILED: {unexpected} unexpected answer(s)")
            }
        };
        format!("{}: {}; {verdict}", self.event_id, counts.join(", "))
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Delivers the event `args` describe, `args.repeat` times with up to `args.concurrency` at
/// once, calling `on_delivery` as each answer comes.
///
/// # Errors
///
/// When the secret cannot be a webhook secret (empty, or surrounded by whitespace).
pub async fn run(
    args: Args,
    mut on_delivery: impl FnMut(&Sent),
) -> Result<Report, Box<dyn Error + Send + Sync>> {
    let args = args.with_event_id();
    let secret = Secret::new(&args.secret)?;
    let event_id = args.id.clone().expect("with_event_id sets an id");
    let stale = args
        .stale
        .map(|seconds| i64::try_from(seconds).unwrap_or(i64::MAX));
    let created = unix_now();
    let body = serde_json::to_vec(&EventBody {
        id: &event_id,
        event_type: &args.event_type,
        created,
        livemode: false,
        api_version: API_VERSION,
        data: Data { object: &args.data },
    })?;
    let body = Bytes::from(body);

    let client: HttpClient = Client::builder(TokioExecutor::new()).build(HttpsConnector::new());
    let next = Arc::new(AtomicU32::new(0));
    let (sender, mut answers) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..args.concurrency.min(args.repeat) {
        let (client, secret, body, url, id) = (
            client.clone(),
            secret.clone(),
            body.clone(),
            args.url.clone(),
            event_id.clone(),
        );
        let (next, sender, repeat) = (next.clone(), sender.clone(), args.repeat);
        tokio::spawn(async move {
            loop {
                let number = next.fetch_add(1, Ordering::SeqCst);
                if number >= repeat {
                    break;
                }
                let timestamp = unix_now().saturating_sub(stale.unwrap_or(0));
                let request = Request::post(url.clone())
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(header::USER_AGENT, "sangho-webhook-send")
                    .header(SIGNATURE_HEADER, secret.sign(timestamp, &body))
                    .header(EVENT_ID_HEADER, id.as_str())
                    .body(Full::new(body.clone()))
                    .expect("a valid request");
                let sent = deliver(&client, number + 1, request).await;
                if sender.send(sent).is_err() {
                    break;
                }
            }
        });
    }
    drop(sender);

    let mut deliveries = Vec::with_capacity(args.repeat as usize);
    while let Some(sent) = answers.recv().await {
        on_delivery(&sent);
        deliveries.push(sent);
    }
    Ok(Report {
        event_id,
        stale: stale.is_some(),
        deliveries,
    })
}

async fn deliver(client: &HttpClient, number: u32, request: Request<Full<Bytes>>) -> Sent {
    let started = Instant::now();
    let answer = tokio::time::timeout(DELIVERY_TIMEOUT, async {
        let response = client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, Box<dyn Error + Send + Sync>>((status, body))
    })
    .await;
    let latency = started.elapsed();
    let (status, outcome) = match answer {
        Ok(Ok((status, body))) => (Some(status), outcome(status, &body)),
        Ok(Err(error)) => (None, format!("error: {}", error_chain(&*error))),
        Err(_) => (None, format!("no answer within {DELIVERY_TIMEOUT:?}")),
    };
    Sent {
        number,
        status,
        outcome,
        latency,
    }
}

/// What an answer says: `processed`, `duplicate`, `accepted`, or a refusal's `error` code.
fn outcome(status: StatusCode, body: &[u8]) -> String {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| json.as_ref().and_then(|json| json.get(name).cloned());
    if status.is_success() {
        if field("duplicate") == Some(Value::Bool(true)) {
            "duplicate".to_owned()
        } else if field("received") == Some(Value::Bool(true)) {
            "processed".to_owned()
        } else {
            "accepted".to_owned()
        }
    } else {
        match field("error") {
            Some(Value::String(code)) => code,
            _ => "no error code in the answer".to_owned(),
        }
    }
}

/// An error and its sources, on one line ("connection refused" sits a few sources down).
fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn unix_now() -> i64 {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    i64::try_from(seconds).expect("a Unix time in range")
}

/// `sangho send`: delivers the event `args` describe, printing a line per answer and the
/// summary. The exit status: 0 when every delivery got the expected answer, 1 otherwise, 2
/// when the secret cannot be a webhook secret.
pub async fn command(args: Args) -> ExitCode {
    let args = args.with_event_id();
    println!(
        "sending {} ({}) to {}: {} {}, {} at a time{}",
        args.id.as_deref().unwrap_or_default(),
        args.event_type,
        args.url,
        args.repeat,
        if args.repeat == 1 {
            "delivery"
        } else {
            "deliveries"
        },
        args.concurrency.min(args.repeat),
        args.stale
            .map(|seconds| format!(", signed {seconds} s ago"))
            .unwrap_or_default(),
    );
    match run(args, |sent| println!("{sent}")).await {
        Ok(report) => {
            println!("{}", report.summary());
            if report.is_success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}
