//! HTTP load harness: the same axum app without and with `SanghoWebhookLayer`, on loopback,
//! driven by the same keep-alive load, one after the other in one run. A third variant does
//! the unavoidable work by hand in the handler (reads the body, checks the timestamp and the
//! HMAC, parses `id` and `type`; no deduplication), to tell the cost of verification from the
//! cost of the idempotency store; a fourth puts the layer over a store that records nothing
//! (the layer's own cost, without deduplication).
//!
//! Each variant runs 5 rounds, the variants taking turns (so that background load on a shared
//! machine falls on all of them alike); each round is a fresh server and store, 64 HTTP/1.1
//! keep-alive connections (hyper's client), each sending signed 2 KiB events back to back for
//! 0.25 s of warm-up and then 1 s of measurement: 5 s measured per variant. The events are unique,
//! or, in the "20% redeliveries" mix, every fifth request resends an event this connection
//! already delivered (a provider's retry). It prints requests/s and p50 / p99 latency for each
//! run and the ratio to the run without the layer.
//!
//! After every run with the layer, it checks that each unique event reached the handler
//! exactly once (the handler counts per event id) and that every delivery was answered 2xx.
//!
//! ```text
//! cargo bench --bench http_load
//! SANGHO_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//! SANGHO_TEST_REDIS_URL=redis://127.0.0.1:6379 cargo bench --bench http_load
//! ```
//!
//! With `SANGHO_TEST_POSTGRES_URL` / `SANGHO_TEST_REDIS_URL` set, it also runs with
//! `PostgresStore` (a fresh table, dropped afterwards) and `RedisStore` (a fresh key prefix,
//! keys expiring after 10 minutes). `SANGHO_LOAD_SECONDS` (per round),
//! `SANGHO_LOAD_ROUNDS` and `SANGHO_LOAD_CONNECTIONS` change the shape. Run without `--bench` (as `cargo test
//! --benches` does), it only checks itself with a short, light load.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{Extension, Router, extract::State, http::header, routing::post};
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use sangho_webhook::{
    SanghoEvent, SanghoWebhookLayer,
    signature::Secret,
    store::{IdempotencyStore, MokaStore},
    testing::{NullStore, fixtures},
};
use tokio::{net::TcpListener, sync::oneshot};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const PATH: &str = "/webhooks/sangho";
const EVENT_TYPE: &str = "payment_intent.succeeded";
const EVENT_SIZE: usize = 2048;

/// How the load is shaped.
#[derive(Clone, Copy)]
struct Load {
    connections: usize,
    warm_up: Duration,
    measure: Duration,
    /// Every `redeliver_every`-th request of a connection is a redelivery (0: never).
    redeliver_every: u64,
}

/// What the handler saw.
#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    per_event: Mutex<HashMap<String, u32>>,
}

async fn handle(
    State(counts): State<Arc<Counts>>,
    event: Option<Extension<SanghoEvent>>,
) -> ([(header::HeaderName, &'static str); 1], &'static str) {
    counts.calls.fetch_add(1, Ordering::Relaxed);
    if let Some(Extension(event)) = event {
        let mut per_event = counts
            .per_event
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *per_event.entry(event.id().to_owned()).or_default() += 1;
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"received":true}"#,
    )
}

/// The two fields a hand-written receiver needs.
#[derive(serde::Deserialize)]
struct Needed<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    event_type: std::borrow::Cow<'a, str>,
}

/// A handler that does the unavoidable work itself, without the layer and without any
/// deduplication: reads the body, checks the timestamp and the HMAC-SHA256 (`hmac` + `sha2`),
/// parses `id` and `type`.
async fn handle_by_hand(
    State(counts): State<Arc<Counts>>,
    headers: http::HeaderMap,
    body: Bytes,
) -> (http::StatusCode, &'static str) {
    use hmac::{Hmac, KeyInit, Mac};
    let verified = (|| {
        let header = headers.get("sangho-signature")?.to_str().ok()?;
        let (mut timestamp, mut v1) = (None, None);
        for item in header.split(',') {
            match item.split_once('=')? {
                ("t", value) => timestamp = Some(value),
                ("v1", value) => v1 = Some(value),
                _ => {}
            }
        }
        let (timestamp, v1) = (timestamp?, v1?);
        if unix_now().abs_diff(timestamp.parse::<i64>().ok()?) > 300 {
            return None;
        }
        let mut tag = [0u8; 32];
        base16ct::lower::decode(v1, &mut tag).ok()?;
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(fixtures::SECRET.as_bytes()).ok()?;
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(&body);
        mac.verify_slice(&tag).ok()?;
        let needed: Needed<'_> = serde_json::from_slice(&body).ok()?;
        Some(!needed.id.is_empty() && !needed.event_type.is_empty())
    })();
    if verified != Some(true) {
        return (http::StatusCode::BAD_REQUEST, r#"{"error":"rejected"}"#);
    }
    counts.calls.fetch_add(1, Ordering::Relaxed);
    (http::StatusCode::OK, r#"{"received":true}"#)
}

/// What serves the webhook route.
#[derive(Clone)]
enum Variant {
    /// The handler alone: it reads nothing.
    Bare,
    /// [`handle_by_hand`]: the unavoidable work in the handler, no deduplication.
    ByHand,
    /// The handler behind the layer.
    Layer(SanghoWebhookLayer),
    /// The handler behind the layer over [`NullStore`]: the layer's cost without a store's
    /// (and without deduplication, so without the exactly-once check).
    LayerNullStore(SanghoWebhookLayer),
}

fn app(variant: Variant, counts: Arc<Counts>) -> Router {
    match variant {
        Variant::Bare => Router::new().route(PATH, post(handle)).with_state(counts),
        Variant::ByHand => Router::new()
            .route(PATH, post(handle_by_hand))
            .with_state(counts),
        Variant::Layer(layer) | Variant::LayerNullStore(layer) => Router::new()
            .route(PATH, post(handle))
            .with_state(counts)
            .layer(layer),
    }
}

/// What one connection measured.
#[derive(Default)]
struct ConnectionReport {
    latencies_us: Vec<u32>,
    measured: u64,
    duplicates: u64,
    failures: HashMap<u16, u64>,
    /// The first delivery of each event, whatever the window.
    unique_ids: Vec<String>,
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

async fn drive(
    addr: SocketAddr,
    secret: Secret,
    run: String,
    connection: usize,
    load: Load,
    start: Instant,
) -> Result<ConnectionReport, BoxError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(driver);

    let measure_from = start + load.warm_up;
    let stop_at = measure_from + load.measure;
    let mut report = ConnectionReport::default();
    let mut sent: Vec<(Bytes, String)> = Vec::new();
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        if now >= stop_at {
            break;
        }
        seq += 1;
        let redelivery = load.redeliver_every > 0 && seq.is_multiple_of(load.redeliver_every);
        let (body, signature) = if redelivery && !sent.is_empty() {
            // A retry of an event this connection delivered before.
            let index = (seq.wrapping_mul(7919) % sent.len() as u64) as usize;
            sent[index].clone()
        } else {
            let id = format!("evt_{run}_{connection}_{seq}");
            let body = Bytes::from(fixtures::sized_event_body(&id, EVENT_TYPE, EVENT_SIZE));
            let signature = secret.sign(unix_now(), &body);
            report.unique_ids.push(id);
            sent.push((body.clone(), signature.clone()));
            (body, signature)
        };
        let request = Request::builder()
            .method(Method::POST)
            .uri(PATH)
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .header("sangho-signature", signature)
            .body(Full::new(body))?;

        sender.ready().await?;
        let began = Instant::now();
        let response = sender.send_request(request).await?;
        let status = response.status();
        let answer = response.into_body().collect().await?.to_bytes();
        let elapsed = began.elapsed();

        if began >= measure_from {
            report.measured += 1;
            report
                .latencies_us
                .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
        }
        if !status.is_success() {
            *report.failures.entry(status.as_u16()).or_default() += 1;
        } else if answer.windows(9).any(|w| w == b"duplicate") {
            report.duplicates += 1;
        }
    }
    drop(sender);
    let _ = driver.await;
    Ok(report)
}

struct RunResult {
    latencies_us: Vec<u32>,
    measured: u64,
    measure: Duration,
    calls: u64,
    duplicates: u64,
    failures: HashMap<u16, u64>,
    exactly_once: Option<Result<usize, String>>,
}

/// Several rounds of one variant, taken together.
struct Summary {
    requests_per_second: f64,
    p50_us: u32,
    p99_us: u32,
    calls: u64,
    duplicates: u64,
    failures: HashMap<u16, u64>,
    exactly_once: Option<Result<usize, String>>,
}

impl Summary {
    fn of(rounds: &[RunResult]) -> Self {
        let mut latencies: Vec<u32> = rounds
            .iter()
            .flat_map(|r| r.latencies_us.iter().copied())
            .collect();
        latencies.sort_unstable();
        let percentile = |p: f64| -> u32 {
            if latencies.is_empty() {
                return 0;
            }
            let rank = ((latencies.len() as f64) * p).ceil() as usize;
            latencies[rank.clamp(1, latencies.len()) - 1]
        };
        let measured: u64 = rounds.iter().map(|r| r.measured).sum();
        let time: f64 = rounds.iter().map(|r| r.measure.as_secs_f64()).sum();
        let mut failures = HashMap::new();
        for round in rounds {
            for (status, count) in &round.failures {
                *failures.entry(*status).or_default() += count;
            }
        }
        let mut exactly_once = None;
        for round in rounds {
            exactly_once = match (exactly_once, &round.exactly_once) {
                (_, None) => None,
                (Some(Err(e)), _) => Some(Err(e)),
                (_, Some(Err(e))) => Some(Err(e.clone())),
                (None, Some(Ok(n))) => Some(Ok(*n)),
                (Some(Ok(a)), Some(Ok(n))) => Some(Ok(a + n)),
            };
        }
        Self {
            requests_per_second: measured as f64 / time,
            p50_us: percentile(0.50),
            p99_us: percentile(0.99),
            calls: rounds.iter().map(|r| r.calls).sum(),
            duplicates: rounds.iter().map(|r| r.duplicates).sum(),
            failures,
            exactly_once,
        }
    }

    fn print(&self, label: &str) {
        eprintln!(
            "  {label:<30} {:>9.0} req/s  p50 {:>6} µs  p99 {:>6} µs  handler calls {:>7}  duplicates {:>6}{}",
            self.requests_per_second,
            self.p50_us,
            self.p99_us,
            self.calls,
            self.duplicates,
            if self.failures.is_empty() {
                String::new()
            } else {
                format!("  non-2xx {:?}", self.failures)
            }
        );
    }
}

async fn run(variant: Variant, load: Load) -> Result<RunResult, BoxError> {
    let layered = matches!(variant, Variant::Layer(_));
    let counts = Arc::new(Counts::default());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, app(variant, counts.clone()))
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );

    let secret = Secret::new(fixtures::SECRET)?;
    let run_id = format!(
        "{}{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() % 1_000_000_000)
    );
    let start = Instant::now();
    let connections: Vec<_> = (0..load.connections)
        .map(|connection| {
            tokio::spawn(drive(
                addr,
                secret.clone(),
                run_id.clone(),
                connection,
                load,
                start,
            ))
        })
        .collect();
    let mut reports: Vec<ConnectionReport> = Vec::with_capacity(connections.len());
    for connection in connections {
        reports.push(connection.await??);
    }
    let _ = stop.send(());
    server.await??;

    let mut failures = HashMap::new();
    for report in &reports {
        for (status, count) in &report.failures {
            *failures.entry(*status).or_default() += count;
        }
    }

    let exactly_once = layered.then(|| {
        let per_event = counts
            .per_event
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut unique = 0;
        for id in reports.iter().flat_map(|r| r.unique_ids.iter()) {
            unique += 1;
            match per_event.get(id) {
                Some(1) => {}
                Some(n) => return Err(format!("{id} processed {n} times")),
                None => return Err(format!("{id} never processed")),
            }
        }
        if per_event.len() != unique {
            return Err(format!(
                "the handler saw {} events, {unique} were sent",
                per_event.len()
            ));
        }
        Ok(unique)
    });

    Ok(RunResult {
        latencies_us: reports
            .iter_mut()
            .flat_map(|r| std::mem::take(&mut r.latencies_us))
            .collect(),
        measured: reports.iter().map(|r| r.measured).sum(),
        measure: load.measure,
        calls: counts.calls.load(Ordering::Relaxed),
        duplicates: reports.iter().map(|r| r.duplicates).sum(),
        failures,
        exactly_once,
    })
}

fn layer_with(store: impl IdempotencyStore) -> Result<SanghoWebhookLayer, BoxError> {
    Ok(
        SanghoWebhookLayer::builder(Secret::new(fixtures::SECRET)?, store)
            // Completed events of a load run need not outlive it by much (Redis keys expire).
            .with_retention(Duration::from_secs(600))
            .with_short_retention_allowed(true)
            .build()?,
    )
}

async fn postgres_store(url: &str) -> Result<sangho_webhook_sqlx::PostgresStore, BoxError> {
    let table = format!(
        "bench_http_load_{}_{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() % 1_000_000_000)
    );
    let store = sangho_webhook_sqlx::PostgresStore::connect(url)
        .await?
        .with_table_name(table)?;
    store.migrate().await?;
    Ok(store)
}

async fn drop_postgres_table(store: &sangho_webhook_sqlx::PostgresStore) -> Result<(), BoxError> {
    let statement = format!("DROP TABLE IF EXISTS {}", store.table());
    sangho_webhook_sqlx::sqlx::query(sangho_webhook_sqlx::sqlx::AssertSqlSafe(statement))
        .execute(store.pool())
        .await?;
    Ok(())
}

async fn redis_store(url: &str) -> Result<sangho_webhook_redis::RedisStore, BoxError> {
    let prefix = format!(
        "sangho-bench:{}:{}:",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    );
    Ok(sangho_webhook_redis::RedisStore::connect(url)
        .await?
        .with_prefix(prefix))
}

fn report_pair(baseline: &Summary, layered: &Summary, failed: &mut Vec<String>, what: &str) {
    let ratio = layered.requests_per_second / baseline.requests_per_second;
    eprintln!(
        "  => {what}: with/without = {ratio:.3}x requests/s; p50 {:.2}x, p99 {:.2}x",
        f64::from(layered.p50_us) / f64::from(baseline.p50_us.max(1)),
        f64::from(layered.p99_us) / f64::from(baseline.p99_us.max(1)),
    );
    match &layered.exactly_once {
        Some(Ok(unique)) => eprintln!("     exactly once: yes ({unique} unique events)"),
        Some(Err(problem)) => {
            eprintln!("     exactly once: NO: {problem}");
            failed.push(format!("{what}: {problem}"));
        }
        None => {}
    }
    if !layered.failures.is_empty() {
        failed.push(format!("{what}: non-2xx answers {:?}", layered.failures));
    }
}

async fn main_async() -> Result<(), BoxError> {
    let full = std::env::args().any(|arg| arg == "--bench");
    let seconds: f64 = std::env::var("SANGHO_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if full { 1.0 } else { 0.2 });
    let connections: usize = std::env::var("SANGHO_LOAD_CONNECTIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if full { 64 } else { 4 });
    let rounds: usize = std::env::var("SANGHO_LOAD_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if full { 5 } else { 1 });
    let unique = Load {
        connections,
        warm_up: if full {
            Duration::from_millis(250)
        } else {
            Duration::from_millis(50)
        },
        measure: Duration::from_secs_f64(seconds),
        redeliver_every: 0,
    };
    let redeliveries = Load {
        redeliver_every: 5,
        ..unique
    };
    eprintln!(
        "http_load: {} keep-alive connections; {rounds} rounds per variant, taking turns, each {:?} warm-up + {:?} measured; {} B events; {} worker threads",
        unique.connections,
        unique.warm_up,
        unique.measure,
        EVENT_SIZE,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let mut failed = Vec::new();
    for (mix, load) in [
        ("unique events", unique),
        ("20% redeliveries", redeliveries),
    ] {
        eprintln!("{mix}:");
        let postgres = match std::env::var("SANGHO_TEST_POSTGRES_URL") {
            Ok(url) => Some(postgres_store(&url).await?),
            Err(_) => None,
        };
        let redis = match std::env::var("SANGHO_TEST_REDIS_URL") {
            Ok(url) => Some(redis_store(&url).await?),
            Err(_) => None,
        };
        // The variants take turns, round after round, so that the machine's background load
        // falls on all of them alike.
        let (mut baseline, mut by_hand, mut null, mut moka, mut on_postgres, mut on_redis) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for _ in 0..rounds {
            baseline.push(run(Variant::Bare, load).await?);
            by_hand.push(run(Variant::ByHand, load).await?);
            let layer = layer_with(NullStore)?;
            null.push(run(Variant::LayerNullStore(layer), load).await?);
            let layer = layer_with(MokaStore::new())?;
            moka.push(run(Variant::Layer(layer), load).await?);
            if let Some(store) = &postgres {
                let layer = layer_with(store.clone())?;
                on_postgres.push(run(Variant::Layer(layer), load).await?);
            }
            if let Some(store) = &redis {
                let layer = layer_with(store.clone())?;
                on_redis.push(run(Variant::Layer(layer), load).await?);
            }
        }
        if let Some(store) = &postgres {
            drop_postgres_table(store).await?;
        }
        let baseline = Summary::of(&baseline);
        baseline.print("without the layer");
        let by_hand = Summary::of(&by_hand);
        by_hand.print("verified + parsed by hand");
        eprintln!(
            "  => by hand (no deduplication) / without: {:.3}x requests/s",
            by_hand.requests_per_second / baseline.requests_per_second
        );
        for (label, rounds) in [
            ("NullStore: no dedup", &null),
            ("MokaStore", &moka),
            ("PostgresStore", &on_postgres),
            ("RedisStore", &on_redis),
        ] {
            if rounds.is_empty() {
                continue;
            }
            let layered = Summary::of(rounds);
            layered.print(&format!("with the layer ({label})"));
            report_pair(&baseline, &layered, &mut failed, &format!("{mix}, {label}"));
            eprintln!(
                "     with the layer / by hand: {:.3}x requests/s",
                layered.requests_per_second / by_hand.requests_per_second
            );
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; ").into())
    }
}

fn main() -> Result<(), BoxError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(main_async())
}
