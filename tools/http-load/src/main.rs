//! HTTP load harness: the same axum app without and with `SanghoWebhookLayer`, on loopback,
//! driven by the same keep-alive load, one after the other in one run. A third variant does
//! the unavoidable work by hand in the handler (reads the body, checks the timestamp and the
//! HMAC, parses `id` and `type`; no deduplication), to tell the cost of verification from the
//! cost of the idempotency store; a fourth puts the layer over a store that records nothing
//! (the layer's own cost, without deduplication).
//!
//! For each database store under test (PostgreSQL, SQLite, MariaDB, Redis) two variants run: the layer
//! over the store, and the **raw recipe**: a handler that verifies and parses by hand (as the
//! third variant does) and then deduplicates with the store crate's documented hand-written
//! baseline on the same database, with a pool (or connection) of the same size as the store's:
//! for SQL, `SELECT` the id, then (after the handler) `INSERT … ON CONFLICT (event_id) DO
//! NOTHING` (as `stores/sqlx/benches/claim_complete.rs`; on MariaDB `ON DUPLICATE KEY UPDATE
//! event_id = event_id`); for Redis, `SET key 1 NX PX <lease>`,
//! then `SET key completed PX <retention>` (as `stores/redis/benches/claim_complete.rs`). The
//! recipe is not exactly-once (two concurrent deliveries of one event both pass the `SELECT`);
//! the load never sends an event twice at once, so the check below holds for it too.
//!
//! On each SQL store two more variants run inbox mode's receipt (`InboxReceiver`: verified,
//! stored on the store's table, answered 202), with the workers stopped and with four workers
//! (`--running-workers N`: N) running a no-op handler (the steady state where received equals
//! processed, woken by each receipt); both are compared with the raw recipe, and so are the
//! events the running workers processed per second while the load ran; each is checked: each
//! unique event stored once (and, with the workers, completed). `--inbox 0` leaves them out.
//! `--drain N` then drains a backlog of N events on each SQL store: N receipts from 64 senders
//! in process, 16 workers (`--drain-workers W`: W) started on the backlog (events/s, and its
//! ratio to the rate of those receipts and to the store's inbox receipt over HTTP earlier in
//! the run, workers stopped, unique events), and the idle receipt-to-handler latency of 200
//! receipts one at a time; `--drain-keys K` gives the backlog's events K objects, keyed by
//! object (each object's events taken one at a time), and `--receipt-order 1` takes every due
//! event in the order of receipt instead of new events first.
//!
//! Each variant runs 5 rounds, the variants taking turns (so that background load on a shared
//! machine falls on all of them alike); each round is a fresh server, 64 HTTP/1.1 keep-alive
//! connections (hyper's client), each sending signed 2 KiB events back to back for 0.25 s of
//! warm-up and then 1 s of measurement: 5 s measured per variant. The in-memory stores are
//! fresh per round; each database store keeps its table (or key prefix) for the whole run,
//! since every event id is new. The events are unique, or, in the "20% redeliveries" mix, every
//! fifth request resends an event this connection already delivered (a provider's retry). It
//! prints, per variant, the median requests/s of the rounds with their range, and p50 / p99
//! latency over all rounds, and the ratios: to the run without the layer, and, for each
//! database store, the layer's to its raw recipe's (the median of the per-round ratios, with
//! their range). Under each variant it prints the CPU time per measured request (the medians of
//! the rounds, read from Linux's `/proc` over the measured second): the whole machine's, the
//! database server's included, and this process's own (the senders and the application), and
//! how busy the machine's cores were. Two cores ÷ a variant's CPU per request is the rate it
//! could reach with every core busy: the ceiling of its ratio to another variant.
//!
//! After every run with the layer over a deduplicating store, and every raw-recipe run, it
//! checks that each unique event reached the handler exactly once (the handler counts per
//! event id) and that every delivery was answered 2xx.
//!
//! ```text
//! cargo run --release -p sangho-http-load
//! SANGHO_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//! SANGHO_TEST_REDIS_URL=redis://127.0.0.1:6379 cargo run --release -p sangho-http-load
//! SANGHO_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//! cargo run --release -p sangho-http-load -- --stores postgres,sqlite --in-memory 0
//! cargo run --release -p sangho-http-load -- --help
//! ```
//!
//! The database stores: `--stores` (or `SANGHO_LOAD_STORES`), a comma-separated list of
//! `postgres`, `sqlite`, `mariadb` and `redis`; by default SQLite (a file in a temporary
//! directory, as `SqliteStore::connect` opens it: WAL, `synchronous = FULL`), and PostgreSQL,
//! MariaDB and Redis when `SANGHO_TEST_POSTGRES_URL` / `SANGHO_TEST_MYSQL_URL` /
//! `SANGHO_TEST_REDIS_URL` is set (the URL of a listed one must be). `PostgresStore`,
//! `MariaDbStore` and their recipes each get a fresh table, dropped afterwards; `RedisStore`
//! and its recipe a fresh key prefix, keys expiring after 10 minutes. `--in-memory 0`
//! (`SANGHO_LOAD_IN_MEMORY=0`) leaves out the four variants without a database (bare, by hand,
//! null store, MokaStore). `--seconds` (per round), `--rounds` and `--connections`
//! (`SANGHO_LOAD_SECONDS`, `SANGHO_LOAD_ROUNDS`, `SANGHO_LOAD_CONNECTIONS`) change the shape.
//! With `--quick` it only checks itself with a short, light load.

use std::{
    collections::HashMap,
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{Extension, Router, extract::State, http::header, routing::post};
use bytes::Bytes;
use clap::Parser;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use sangho_webhook::{
    SanghoEvent, SanghoWebhookLayer,
    inbox::{Filter, Inbox, InboxReceiver, InboxWorker, TakeOrder},
    signature::Secret,
    store::{IdempotencyStore, MokaStore},
    testing::{NullStore, fixtures},
};
use sangho_webhook_redis::{RedisStore, redis};
use sangho_webhook_sqlx::{
    GroupCommit, MariaDbStore, PostgresStore, SqlStore, SqliteStore,
    dialect::Dialect,
    sqlx::{
        self, AssertSqlSafe, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type,
        mysql::MySqlPoolOptions, postgres::PgPoolOptions, sqlite::SqlitePoolOptions,
    },
};
use tokio::{net::TcpListener, sync::oneshot};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The recipe's insert clause that leaves an existing row alone, on PostgreSQL and SQLite.
const ON_CONFLICT_DO_NOTHING: &str = "ON CONFLICT (event_id) DO NOTHING";
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

/// The unavoidable work of a hand-written receiver: checks the timestamp and the HMAC-SHA256
/// (`hmac` + `sha2`) of `body`, and parses `id` and `type`. `None` for anything to reject.
fn verify_by_hand<'a>(headers: &http::HeaderMap, body: &'a [u8]) -> Option<Needed<'a>> {
    use hmac::{Hmac, KeyInit, Mac};
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
    mac.update(body);
    mac.verify_slice(&tag).ok()?;
    let needed: Needed<'_> = serde_json::from_slice(body).ok()?;
    (!needed.id.is_empty() && !needed.event_type.is_empty()).then_some(needed)
}

/// A handler that does the unavoidable work itself ([`verify_by_hand`]), without the layer and
/// without any deduplication.
async fn handle_by_hand(
    State(counts): State<Arc<Counts>>,
    headers: http::HeaderMap,
    body: Bytes,
) -> (http::StatusCode, &'static str) {
    if verify_by_hand(&headers, &body).is_none() {
        return (http::StatusCode::BAD_REQUEST, r#"{"error":"rejected"}"#);
    }
    counts.calls.fetch_add(1, Ordering::Relaxed);
    (http::StatusCode::OK, r#"{"received":true}"#)
}

/// A store crate's documented hand-written deduplication: what a receiver without the layer
/// writes against the same database. Not exactly-once: two concurrent deliveries of one event
/// can both find it unseen.
trait Recipe: Send + Sync + 'static {
    /// Before the handler: whether the event was seen before (a duplicate, not to process).
    fn seen<'a>(&'a self, event_id: &'a str) -> BoxFuture<'a, Result<bool, BoxError>>;
    /// After the handler: records the event as processed.
    fn record<'a>(
        &'a self,
        event_id: &'a str,
        event_type: &'a str,
    ) -> BoxFuture<'a, Result<(), BoxError>>;
}

/// The SQL recipe (`stores/sqlx/benches/claim_complete.rs`): `SELECT` the id, then `INSERT …
/// ON CONFLICT (event_id) DO NOTHING` in the provider's documented table, over a pool of its
/// own.
struct SqlRecipe<DB: Database> {
    pool: Pool<DB>,
    select: Arc<str>,
    insert: Arc<str>,
}

impl<DB> SqlRecipe<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    /// Creates the provider's documented table `table` (`timestamp_default`: the database's
    /// "now"); `placeholders` are the dialect's first two parameters, `do_nothing` its clause
    /// that leaves an existing row alone.
    async fn new(
        pool: Pool<DB>,
        table: &str,
        placeholders: [&str; 2],
        timestamp_default: &str,
        do_nothing: &str,
    ) -> Result<Self, BoxError> {
        let schema = format!(
            "CREATE TABLE {table} (
               event_id     VARCHAR(50)  PRIMARY KEY,
               event_type   VARCHAR(100) NOT NULL,
               processed_at TIMESTAMP    DEFAULT {timestamp_default}
             );
             CREATE INDEX {table}_processed_at_idx ON {table} (processed_at);"
        );
        sqlx::raw_sql(AssertSqlSafe(schema)).execute(&pool).await?;
        let [first, second] = placeholders;
        Ok(Self {
            pool,
            select: format!("SELECT event_id FROM {table} WHERE event_id = {first}").into(),
            insert: format!(
                "INSERT INTO {table} (event_id, event_type) VALUES ({first}, {second}) {do_nothing}"
            )
            .into(),
        })
    }
}

impl<DB> Recipe for SqlRecipe<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    fn seen<'a>(&'a self, event_id: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        let query =
            sqlx::query_as::<DB, (String,)>(AssertSqlSafe(self.select.clone())).bind(event_id);
        Box::pin(async move { Ok(query.fetch_optional(&self.pool).await?.is_some()) })
    }

    fn record<'a>(
        &'a self,
        event_id: &'a str,
        event_type: &'a str,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        let query = sqlx::query::<DB>(AssertSqlSafe(self.insert.clone()))
            .bind(event_id)
            .bind(event_type);
        Box::pin(async move {
            query.execute(&self.pool).await?;
            Ok(())
        })
    }
}

/// The Redis recipe (`stores/redis/benches/claim_complete.rs`): `SET key 1 NX PX <lease>`
/// (not set: seen), then `SET key completed PX <retention>`, over one multiplexed connection
/// as `RedisStore` uses.
struct RedisRecipe {
    connection: redis::aio::ConnectionManager,
    prefix: String,
}

impl RedisRecipe {
    const LEASE_MS: u64 = 30_000;
    const RETENTION_MS: u64 = 600_000;
}

impl Recipe for RedisRecipe {
    fn seen<'a>(&'a self, event_id: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        let mut connection = self.connection.clone();
        let mut set = redis::cmd("SET");
        set.arg(format!("{}{event_id}", self.prefix))
            .arg("1")
            .arg("NX")
            .arg("PX")
            .arg(Self::LEASE_MS);
        Box::pin(async move {
            let set: Option<String> = set.query_async(&mut connection).await?;
            Ok(set.is_none())
        })
    }

    fn record<'a>(
        &'a self,
        event_id: &'a str,
        _event_type: &'a str,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        let mut connection = self.connection.clone();
        let mut set = redis::cmd("SET");
        set.arg(format!("{}{event_id}", self.prefix))
            .arg("completed")
            .arg("PX")
            .arg(Self::RETENTION_MS);
        Box::pin(async move {
            set.exec_async(&mut connection).await?;
            Ok(())
        })
    }
}

/// A handler that verifies and parses by hand ([`verify_by_hand`]) and deduplicates with a
/// [`Recipe`]: a duplicate is answered 200 without processing; a database error 500.
async fn handle_recipe(
    State((counts, recipe)): State<(Arc<Counts>, Arc<dyn Recipe>)>,
    headers: http::HeaderMap,
    body: Bytes,
) -> (http::StatusCode, &'static str) {
    let Some(event) = verify_by_hand(&headers, &body) else {
        return (http::StatusCode::BAD_REQUEST, r#"{"error":"rejected"}"#);
    };
    match recipe.seen(&event.id).await {
        Ok(false) => {}
        Ok(true) => {
            return (
                http::StatusCode::OK,
                r#"{"received":true,"duplicate":true}"#,
            );
        }
        Err(_) => {
            return (
                http::StatusCode::INTERNAL_SERVER_ERROR,
                r#"{"error":"store"}"#,
            );
        }
    }
    counts.calls.fetch_add(1, Ordering::Relaxed);
    *counts
        .per_event
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(event.id.clone().into_owned())
        .or_default() += 1;
    match recipe.record(&event.id, &event.event_type).await {
        Ok(()) => (http::StatusCode::OK, r#"{"received":true}"#),
        Err(_) => (
            http::StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error":"store"}"#,
        ),
    }
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
    /// [`handle_recipe`]: verified by hand, deduplicated by a store crate's raw recipe.
    Recipe(Arc<dyn Recipe>),
    /// Inbox mode's receipt: verified, stored, answered 202 (the handler runs in a worker).
    Inbox(InboxReceiver),
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
        Variant::Recipe(recipe) => Router::new()
            .route(PATH, post(handle_recipe))
            .with_state((counts, recipe)),
        Variant::Inbox(receiver) => Router::new().route_service(PATH, receiver),
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
    /// The events sent for the first time.
    unique: usize,
    /// Inbox mode with its workers running: the events they completed while the load ran
    /// (the rest they completed after it), as a share of the events received.
    processed_while_received: Option<f64>,
    /// The CPU time spent while the requests were measured.
    cpu: Option<CpuTime>,
}

impl RunResult {
    fn requests_per_second(&self) -> f64 {
        self.measured as f64 / self.measure.as_secs_f64()
    }

    /// The CPU time per measured request, and the share of the machine's CPU that was busy.
    fn cpu_per_request(&self) -> Option<(CpuTime, f64)> {
        let cpu = self.cpu?;
        let requests = self.measured.max(1) as f64;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let capacity_us = self.measure.as_secs_f64() * 1e6 * cores;
        Some((
            CpuTime {
                machine_us: cpu.machine_us / requests,
                process_us: cpu.process_us / requests,
            },
            cpu.machine_us / capacity_us,
        ))
    }
}

/// Per-round `ratios` as the harness reports them: their median, lowest and highest.
fn per_round(ratios: &[f64]) -> (f64, f64, f64) {
    (
        median(ratios),
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    )
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Several rounds of one variant, taken together.
struct Summary {
    /// The median of the rounds' requests/s.
    requests_per_second: f64,
    /// The slowest and the fastest round's requests/s.
    spread: (f64, f64),
    p50_us: u32,
    p99_us: u32,
    calls: u64,
    duplicates: u64,
    failures: HashMap<u16, u64>,
    exactly_once: Option<Result<usize, String>>,
    /// The median of the rounds' [`RunResult::processed_while_received`].
    processed_while_received: Option<f64>,
    /// The medians of the rounds' CPU time per request (the machine's, this process's), and
    /// of the share of the machine's CPU that was busy.
    cpu_per_request: Option<(CpuTime, f64)>,
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
        let per_round: Vec<f64> = rounds.iter().map(RunResult::requests_per_second).collect();
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
            requests_per_second: median(&per_round),
            spread: per_round
                .iter()
                .fold((f64::INFINITY, 0.0), |(low, high), &r| {
                    (low.min(r), high.max(r))
                }),
            p50_us: percentile(0.50),
            p99_us: percentile(0.99),
            calls: rounds.iter().map(|r| r.calls).sum(),
            duplicates: rounds.iter().map(|r| r.duplicates).sum(),
            failures,
            exactly_once,
            processed_while_received: rounds
                .iter()
                .map(|round| round.processed_while_received)
                .collect::<Option<Vec<f64>>>()
                .map(|shares| median(&shares)),
            cpu_per_request: rounds
                .iter()
                .map(RunResult::cpu_per_request)
                .collect::<Option<Vec<_>>>()
                .map(|per_round| {
                    let of = |field: fn(&(CpuTime, f64)) -> f64| {
                        median(&per_round.iter().map(field).collect::<Vec<f64>>())
                    };
                    (
                        CpuTime {
                            machine_us: of(|(cpu, _)| cpu.machine_us),
                            process_us: of(|(cpu, _)| cpu.process_us),
                        },
                        of(|(_, busy)| *busy),
                    )
                }),
        }
    }

    fn print(&self, label: &str) {
        eprintln!(
            "  {label:<34} {:>9.0} req/s [{:.0}–{:.0}]  p50 {:>6} µs  p99 {:>6} µs  handler calls {:>7}  duplicates {:>6}{}",
            self.requests_per_second,
            self.spread.0,
            self.spread.1,
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
        if let Some((cpu, busy)) = self.cpu_per_request {
            eprintln!(
                "     CPU per request {:.0} µs (this process {:.0} µs); machine busy {:.0} %",
                cpu.machine_us,
                cpu.process_us,
                busy * 100.0
            );
        }
    }
}

async fn run(variant: Variant, load: Load) -> Result<RunResult, BoxError> {
    let deduplicated = matches!(variant, Variant::Layer(_) | Variant::Recipe(_));
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
    // The CPU time spent over the window the connections measure.
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until((start + load.warm_up).into()).await;
        let before = CpuTime::now();
        tokio::time::sleep(load.measure).await;
        Some(CpuTime::now()?.since(before?))
    });
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
    let cpu = cpu.await?;

    let mut failures = HashMap::new();
    for report in &reports {
        for (status, count) in &report.failures {
            *failures.entry(*status).or_default() += count;
        }
    }

    let exactly_once = deduplicated.then(|| {
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
        unique: reports.iter().map(|r| r.unique_ids.len()).sum(),
        processed_while_received: None,
        cpu,
    })
}

/// Inbox mode's drain on `inbox`: `events` receipts from 64 concurrent senders (in process,
/// without HTTP), then `concurrency` workers (a no-op handler) started on the backlog, then,
/// idle, 200 receipts one at a time, each timed from its 202 to its handler's start. Prints
/// the receipt and drain rates, their ratio, the machine's CPU time per drained event, and the
/// idle wake-up latency; answers the drain rate. With `keys` > 0, event `n` belongs to object
/// `n % keys`, and the receiver keys events by object (`with_ordering_key(object_id)`): the
/// events of one object are taken one at a time.
async fn drain(
    name: &str,
    inbox: &Arc<dyn Inbox>,
    events: usize,
    keys: usize,
    concurrency: usize,
    order: TakeOrder,
) -> Result<f64, BoxError> {
    let secret = Secret::new(fixtures::SECRET)?;
    let mut receiver = InboxReceiver::builder(secret.clone(), inbox.clone());
    if keys > 0 {
        receiver = receiver.with_ordering_key(sangho_webhook::inbox::object_id);
    }
    let receiver = receiver.build()?;
    let tag = run_tag();
    let started = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for sender in 0..64 {
        let (receiver, secret, tag) = (receiver.clone(), secret.clone(), tag.clone());
        senders.spawn(async move {
            let mut resends = 0_usize;
            for n in (sender..events).step_by(64) {
                let id = format!("evt_drain_{tag}_{n}");
                let delivery = match keys {
                    0 => sangho_webhook::testing::Delivery::event(&id, fixtures::EVENT_TYPE),
                    keys => sangho_webhook::testing::Delivery::body(format!(
                        r#"{{"id":"{id}","type":"{}","data":{{"object":{{"id":"obj_{}"}}}}}}"#,
                        fixtures::EVENT_TYPE,
                        n % keys
                    )),
                };
                // A 503 (the store was busy past its timeout) is sent again, as the provider
                // does; counted and reported.
                let mut resent = 0;
                loop {
                    let request = delivery.clone().signed(&secret, unix_now()).into_request();
                    let answer = sangho_webhook::testing::send(&receiver, request).await;
                    match answer.status {
                        status if status.is_success() => break,
                        StatusCode::SERVICE_UNAVAILABLE if resent < 20 => {
                            resent += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        status => return Err(format!("receipt of {id}: {status}")),
                    }
                }
                resends += resent;
            }
            Ok(resends)
        });
    }
    let mut resends = 0;
    for sent in senders.join_all().await {
        resends += sent?;
    }
    let receipt_rate = events as f64 / started.elapsed().as_secs_f64();

    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let handler = tower::service_fn(move |_: Request<sangho_webhook::WebhookBody>| {
        let _ = started_tx.send(Instant::now());
        async { Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok"))) }
    });
    let started = Instant::now();
    let cpu_before = CpuTime::now();
    let workers = InboxWorker::builder(inbox.clone(), handler)
        .with_concurrency(concurrency)
        .with_take_order(order)
        .build()?
        .start();
    // Timed by the handler's calls, not by polling the store's statistics, which would load
    // the database the drain measures.
    for _ in 0..events {
        tokio::time::timeout(Duration::from_secs(60), started_rx.recv())
            .await?
            .ok_or("the workers stopped")?;
    }
    drained(inbox).await?;
    let drain_rate = events as f64 / started.elapsed().as_secs_f64();
    if let (Some(before), Some(after)) = (cpu_before, CpuTime::now()) {
        eprintln!(
            "  {name} drain: {:.0} µs of the machine's CPU per drained event",
            after.since(before).machine_us / events as f64
        );
    }

    let mut latencies = Vec::new();
    for n in 0..200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let id = format!("evt_idle_{tag}_{n}");
        let request = sangho_webhook::testing::Delivery::event(&id, fixtures::EVENT_TYPE)
            .signed(&secret, unix_now())
            .into_request();
        let answered = sangho_webhook::testing::send(&receiver, request).await;
        let acknowledged = Instant::now();
        if !answered.status.is_success() {
            return Err(format!("idle receipt {id}: {}", answered.status).into());
        }
        let handled = tokio::time::timeout(Duration::from_secs(10), started_rx.recv())
            .await?
            .ok_or("the workers stopped")?;
        latencies.push(handled.saturating_duration_since(acknowledged));
    }
    workers.shutdown(Duration::from_secs(10)).await;
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    eprintln!(
        "  {name} inbox: {events} receipts ({}; {resends} resent after a 503) at {receipt_rate:.0}/s, drained at \
         {drain_rate:.0} events/s by {concurrency} workers: drain / receipt = {:.2}x; idle \
         receipt-to-handler p50 {:?}, p99 {:?}",
        match keys {
            0 => "no ordering keys".to_owned(),
            keys => format!("{keys} ordering keys"),
        },
        drain_rate / receipt_rate,
        at(0.5),
        at(0.99),
    );
    Ok(drain_rate)
}

/// CPU time spent so far, or over a window, in microseconds, from Linux's `/proc` (`None`
/// elsewhere): the whole machine's (every process and the kernel, not idle: the database
/// server included) and this process's own (the senders, the application and its store).
/// A variant's cost, whatever its wall-clock time on a shared machine.
#[derive(Debug, Clone, Copy)]
struct CpuTime {
    machine_us: f64,
    process_us: f64,
}

impl CpuTime {
    /// The CPU time spent since the machine and this process started.
    fn now() -> Option<Self> {
        // In USER_HZ, 100 a second on Linux.
        const TICK_US: f64 = 10_000.0;
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let ticks: Vec<f64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .map(|field| field.parse().unwrap_or(0.0))
            .collect();
        // user, nice, system, irq, softirq, steal: not idle or iowait.
        let machine: f64 = [0, 1, 2, 5, 6, 7]
            .iter()
            .filter_map(|&field| ticks.get(field))
            .sum();
        // `utime` and `stime`, the 14th and 15th fields; the 2nd (the command's name, in
        // parentheses) may hold spaces, so the fields are counted after its `)`.
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let after_name = &own[own.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let process: f64 = [11, 12]
            .iter()
            .filter_map(|&field| fields.get(field)?.parse::<f64>().ok())
            .sum();
        Some(Self {
            machine_us: machine * TICK_US,
            process_us: process * TICK_US,
        })
    }

    /// The CPU time spent between `earlier` and `self`.
    fn since(self, earlier: Self) -> Self {
        Self {
            machine_us: self.machine_us - earlier.machine_us,
            process_us: self.process_us - earlier.process_us,
        }
    }
}

/// Waits until nothing waits or runs in `inbox` (at most 2 minutes).
async fn drained(inbox: &Arc<dyn Inbox>) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stats = inbox.stats().await?;
        if stats.received == 0 && stats.in_flight == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the workers did not drain: {stats:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A no-op handler for the inbox's workers: 200 at once.
async fn handle_in_worker() -> &'static str {
    "ok"
}

/// Inbox mode's receipt under `load`, with the workers stopped (`None`), or that many running
/// (a no-op handler; whether they keep up with the receipts is reported). Checks that each
/// unique event was stored once (and, with the workers, completed) and every delivery answered
/// 2xx.
async fn run_inbox(
    inbox: &Arc<dyn Inbox>,
    workers: Option<usize>,
    load: Load,
) -> Result<RunResult, BoxError> {
    let all = Filter::new();
    let receiver = InboxReceiver::builder(Secret::new(fixtures::SECRET)?, inbox.clone()).build()?;
    let handlers = Router::new().route(PATH, post(handle_in_worker));
    let running = workers.map(|workers| {
        InboxWorker::builder(inbox.clone(), handlers)
            .with_concurrency(workers)
            .build()
            .map(InboxWorker::start)
    });
    let running = running.transpose()?;
    if running.is_some() {
        // The steady state starts from an empty backlog (the rounds without workers left one).
        drained(inbox).await?;
    }
    let before = inbox.count(&all).await?;
    let completed_before = inbox.stats().await?.completed;
    let mut result = run(Variant::Inbox(receiver), load).await?;
    if let Some(running) = running {
        let processed = inbox.stats().await?.completed - completed_before;
        result.processed_while_received = Some(processed as f64 / result.unique.max(1) as f64);
        drained(inbox).await?;
        running.shutdown(Duration::from_secs(10)).await;
    }
    let stored = inbox.count(&all).await? - before;
    let completed = inbox.stats().await?.completed - completed_before;
    let unique = result.unique as u64;
    result.exactly_once = Some(if stored != unique {
        Err(format!("{stored} events stored, {unique} sent"))
    } else if workers.is_some() && completed != unique {
        Err(format!("{completed} events completed, {unique} sent"))
    } else {
        Ok(result.unique)
    });
    Ok(result)
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

/// A tag unique to this process and moment, for table names and key prefixes.
fn run_tag() -> String {
    format!(
        "{}_{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() % 1_000_000_000)
    )
}

/// `store` with group commit off, as the layer's store and as an inbox.
fn ungrouped<D: Dialect>(store: &SqlStore<D>) -> (Arc<dyn IdempotencyStore>, Arc<dyn Inbox>) {
    let store = store.clone().with_group_commit(GroupCommit::OFF);
    (Arc::new(store.clone()), Arc::new(store))
}

/// What a [`Backend`] leaves to clean up after the run.
type Cleanup = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), BoxError>> + Send>;

/// A database store under test: the store (for the layer) and its crate's raw [`Recipe`] on
/// the same database server, each with a table (or key prefix) of its own.
struct Backend {
    /// The database, e.g. `PostgreSQL`.
    name: &'static str,
    /// The store type, e.g. `PostgresStore`.
    store_name: &'static str,
    store: Arc<dyn IdempotencyStore>,
    recipe: Arc<dyn Recipe>,
    /// Inbox mode on the store's table (SQL stores).
    inbox: Option<Arc<dyn Inbox>>,
    /// The same store with group commit off, each write its own commit (SQL stores).
    ungrouped: Option<(Arc<dyn IdempotencyStore>, Arc<dyn Inbox>)>,
    cleanup: Cleanup,
}

/// The databases the harness can put under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Postgres,
    Sqlite,
    MariaDb,
    Redis,
}

impl Kind {
    const ALL: [Self; 4] = [Self::Postgres, Self::Sqlite, Self::MariaDb, Self::Redis];

    fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Sqlite => "sqlite",
            Self::MariaDb => "mariadb",
            Self::Redis => "redis",
        }
    }

    /// The variable with the server's URL; none for SQLite, which runs in a temporary file.
    fn url_variable(self) -> Option<&'static str> {
        match self {
            Self::Postgres => Some("SANGHO_TEST_POSTGRES_URL"),
            Self::Sqlite => None,
            Self::MariaDb => Some("SANGHO_TEST_MYSQL_URL"),
            Self::Redis => Some("SANGHO_TEST_REDIS_URL"),
        }
    }

    /// The kinds `list` names (`--stores`), or by default SQLite and those whose URL is set.
    fn selected(list: Option<&str>) -> Result<Vec<Self>, BoxError> {
        let Some(list) = list else {
            return Ok(Self::ALL
                .into_iter()
                .filter(|kind| kind.url_variable().is_none_or(|v| std::env::var(v).is_ok()))
                .collect());
        };
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                Self::ALL
                    .into_iter()
                    .find(|kind| kind.name() == name)
                    .ok_or_else(|| {
                        format!(
                            "--stores: unknown store {name:?} (postgres, sqlite, mariadb, redis)"
                        )
                        .into()
                    })
            })
            .collect()
    }

    /// Opens the store and its recipe, each on a fresh table (or key prefix).
    async fn open(self, group: Grouping) -> Result<Backend, BoxError> {
        let url = match self.url_variable() {
            Some(variable) => std::env::var(variable)
                .map_err(|_| format!("{} is listed but {variable} is not set", self.name()))?,
            None => String::new(),
        };
        let tag = run_tag();
        Ok(match self {
            Self::Postgres => {
                let store = PostgresStore::connect(&url)
                    .await?
                    .with_table_name(format!("bench_http_load_{tag}"))?;
                let settings = group.applied(store.group_commit(), group.postgres_writers);
                let store = store.with_group_commit(settings);
                store.migrate().await?;
                // The same pool size and timeout as `PostgresStore::connect`'s.
                let pool = PgPoolOptions::new()
                    .max_connections(PostgresStore::MAX_CONNECTIONS)
                    .acquire_timeout(PostgresStore::ACQUIRE_TIMEOUT)
                    .connect(&url)
                    .await?;
                let raw_table = format!("bench_http_load_{tag}_raw");
                let recipe = SqlRecipe::new(
                    pool.clone(),
                    &raw_table,
                    ["$1", "$2"],
                    "NOW()",
                    ON_CONFLICT_DO_NOTHING,
                )
                .await?;
                let drop = format!("DROP TABLE IF EXISTS {}, {raw_table}", store.table());
                Backend {
                    name: "PostgreSQL",
                    store_name: "PostgresStore",
                    store: Arc::new(store.clone()),
                    recipe: Arc::new(recipe),
                    inbox: Some(Arc::new(store.clone())),
                    ungrouped: Some(ungrouped(&store)),
                    cleanup: Box::new(move || {
                        Box::pin(async move {
                            sqlx::raw_sql(AssertSqlSafe(drop)).execute(&pool).await?;
                            pool.close().await;
                            store.pool().close().await;
                            Ok(())
                        })
                    }),
                }
            }
            Self::Sqlite => {
                let dir = tempfile::tempdir()?;
                let url = |file: &str| format!("sqlite://{}", dir.path().join(file).display());
                let mut store = SqliteStore::connect(&url("store.db")).await?;
                if let Some(max) = group.max {
                    store = store.with_group_commit(GroupCommit::SQLITE.with_max_operations(max));
                }
                store.migrate().await?;
                // As `SqliteStore::connect` opens its pool: WAL, `synchronous = FULL`.
                let pool = SqlitePoolOptions::new()
                    .max_connections(SqliteStore::MAX_CONNECTIONS)
                    .acquire_timeout(SqliteStore::ACQUIRE_TIMEOUT)
                    .connect_with(SqliteStore::connect_options(&url("recipe.db"))?)
                    .await?;
                let recipe = SqlRecipe::new(
                    pool.clone(),
                    "processed_webhook_events",
                    ["?1", "?2"],
                    "CURRENT_TIMESTAMP",
                    ON_CONFLICT_DO_NOTHING,
                )
                .await?;
                Backend {
                    name: "SQLite",
                    store_name: "SqliteStore",
                    store: Arc::new(store.clone()),
                    recipe: Arc::new(recipe),
                    inbox: Some(Arc::new(store.clone())),
                    ungrouped: Some(ungrouped(&store)),
                    cleanup: Box::new(move || {
                        Box::pin(async move {
                            pool.close().await;
                            store.pool().close().await;
                            dir.close()?;
                            Ok(())
                        })
                    }),
                }
            }
            Self::MariaDb => {
                let store = MariaDbStore::connect(&url)
                    .await?
                    .with_table_name(format!("bench_http_load_{tag}"))?;
                // MariaDB's grouping of today's claims is opt-in (every other write is grouped
                // by default): the harness measures it beside grouping off, or the default.
                let grouped = match group.mariadb_default {
                    true => store.group_commit(),
                    false => GroupCommit::MARIADB,
                };
                let settings = group.applied(grouped, group.mariadb_writers);
                let store = store.with_group_commit(settings);
                store.migrate().await?;
                // The same pool size and timeout as `MariaDbStore::connect`'s.
                let pool = MySqlPoolOptions::new()
                    .max_connections(MariaDbStore::MAX_CONNECTIONS)
                    .acquire_timeout(MariaDbStore::ACQUIRE_TIMEOUT)
                    .connect(&url)
                    .await?;
                let raw_table = format!("bench_http_load_{tag}_raw");
                let recipe = SqlRecipe::new(
                    pool.clone(),
                    &raw_table,
                    ["?", "?"],
                    "CURRENT_TIMESTAMP",
                    "ON DUPLICATE KEY UPDATE event_id = event_id",
                )
                .await?;
                // The store's receipt sequence is a table to MariaDB, and outlives the store's
                // table unless dropped with it.
                let drop = format!(
                    "DROP TABLE IF EXISTS {table}, {table}_sequence, {raw_table}",
                    table = store.table()
                );
                Backend {
                    name: "MariaDB",
                    store_name: "MariaDbStore",
                    store: Arc::new(store.clone()),
                    recipe: Arc::new(recipe),
                    inbox: Some(Arc::new(store.clone())),
                    ungrouped: Some(ungrouped(&store)),
                    cleanup: Box::new(move || {
                        Box::pin(async move {
                            sqlx::raw_sql(AssertSqlSafe(drop)).execute(&pool).await?;
                            pool.close().await;
                            store.pool().close().await;
                            Ok(())
                        })
                    }),
                }
            }
            Self::Redis => {
                let prefix = format!("sangho-bench:{tag}:");
                let store = RedisStore::connect(url.as_str())
                    .await?
                    .with_prefix(format!("{prefix}store:"));
                // One multiplexed connection, as `RedisStore::connect` opens.
                let connection = redis::aio::ConnectionManager::new_with_config(
                    redis::Client::open(url.as_str())?,
                    RedisStore::manager_config(),
                )
                .await?;
                Backend {
                    name: "Redis",
                    store_name: "RedisStore",
                    store: Arc::new(store),
                    recipe: Arc::new(RedisRecipe {
                        connection,
                        prefix: format!("{prefix}recipe:"),
                    }),
                    inbox: None,
                    ungrouped: None,
                    // The keys expire after the retention (10 minutes).
                    cleanup: Box::new(|| Box::pin(async { Ok(()) })),
                }
            }
        })
    }
}

/// Prints whether each unique event was processed exactly once, and records any failure.
fn check(summary: &Summary, failed: &mut Vec<String>, what: &str) {
    match &summary.exactly_once {
        Some(Ok(unique)) => eprintln!("     exactly once: yes ({unique} unique events)"),
        Some(Err(problem)) => {
            eprintln!("     exactly once: NO: {problem}");
            failed.push(format!("{what}: {problem}"));
        }
        None => {}
    }
    if let Some(share) = summary.processed_while_received {
        // Below 1: the workers fell behind the receipts, and finished after the load.
        eprintln!(
            "     processed while the load ran: {:.0} % of the events received (median of the rounds)",
            share * 100.0
        );
    }
    if !summary.failures.is_empty() {
        failed.push(format!("{what}: non-2xx answers {:?}", summary.failures));
    }
}

fn report_pair(baseline: &Summary, layered: &Summary, failed: &mut Vec<String>, what: &str) {
    let ratio = layered.requests_per_second / baseline.requests_per_second;
    eprintln!(
        "  => {what}: with/without = {ratio:.3}x requests/s; p50 {:.2}x, p99 {:.2}x",
        f64::from(layered.p50_us) / f64::from(baseline.p50_us.max(1)),
        f64::from(layered.p99_us) / f64::from(baseline.p99_us.max(1)),
    );
    check(layered, failed, what);
}

/// Prints the layer's throughput over a database store against its raw recipe's: the median
/// of the per-round ratios (the variants ran in turns, so round `i` of each saw the same
/// background load) with their range, and the latency ratios.
fn report_against_recipe(name: &str, what: &str, layered: &[RunResult], raw: &[RunResult]) {
    report_against(name, what, "raw recipe", layered, raw);
}

/// Prints the events the running workers processed per second while the load ran (the
/// receipts' rate times the share processed meanwhile) against the raw recipe's requests/s:
/// the median of the per-round ratios with their range. With the share at 100 % it is the
/// receipts' own ratio; below, the workers fell behind, and this is the rate they kept.
fn report_processed_against_recipe(name: &str, working: &[RunResult], raw: &[RunResult]) {
    let ratios: Vec<f64> = working
        .iter()
        .zip(raw)
        .filter_map(|(working, raw)| {
            let share = working.processed_while_received?;
            Some(share * working.requests_per_second() / raw.requests_per_second())
        })
        .collect();
    if ratios.is_empty() {
        return;
    }
    let (median, lowest, highest) = per_round(&ratios);
    eprintln!(
        "  => {name}: events processed while the load ran, per second / raw recipe = {median:.3}x (per-round ratios {lowest:.3}–{highest:.3})",
    );
}

/// Prints `what` against `against` (rounds of the same run, taking turns): the median of the
/// per-round requests/s ratios with their range, and the p50 and p99 latency ratios.
fn report_against(name: &str, what: &str, against: &str, layered: &[RunResult], raw: &[RunResult]) {
    let ratios: Vec<f64> = layered
        .iter()
        .zip(raw)
        .map(|(layered, raw)| layered.requests_per_second() / raw.requests_per_second())
        .collect();
    let (layered, raw) = (Summary::of(layered), Summary::of(raw));
    let (median, lowest, highest) = per_round(&ratios);
    eprintln!(
        "  => {name}: {what} / {against} = {median:.3}x requests/s (per-round ratios {lowest:.3}–{highest:.3}); p50 {:.2}x, p99 {:.2}x",
        f64::from(layered.p50_us) / f64::from(raw.p50_us.max(1)),
        f64::from(layered.p99_us) / f64::from(raw.p99_us.max(1)),
    );
}

/// The command line; each option can be set by its environment variable too.
#[derive(Debug, Parser)]
#[command(
    name = "http-load",
    about = "Drives the same axum app without and with SanghoWebhookLayer (and the stores' raw recipes) with the same HTTP load, and prints the ratios"
)]
struct Args {
    /// A short, light load that only checks the harness (each option below still applies)
    #[arg(long)]
    quick: bool,
    /// Seconds measured per round [default: 1; 0.2 with --quick]
    #[arg(long, value_name = "SECONDS", env = "SANGHO_LOAD_SECONDS")]
    seconds: Option<f64>,
    /// Keep-alive connections [default: 64; 4 with --quick]
    #[arg(long, value_name = "N", env = "SANGHO_LOAD_CONNECTIONS")]
    connections: Option<usize>,
    /// Rounds per variant [default: 5; 1 with --quick]
    #[arg(long, value_name = "N", env = "SANGHO_LOAD_ROUNDS")]
    rounds: Option<usize>,
    /// The database stores, comma-separated: postgres, sqlite, redis [default: sqlite, and
    /// postgres and redis when SANGHO_TEST_POSTGRES_URL / SANGHO_TEST_REDIS_URL is set]
    #[arg(long, value_name = "LIST", env = "SANGHO_LOAD_STORES")]
    stores: Option<String>,
    /// 0 leaves out the variants without a database (bare, by hand, null store, MokaStore)
    #[arg(
        long,
        value_name = "0|1",
        env = "SANGHO_LOAD_IN_MEMORY",
        default_value = "1"
    )]
    in_memory: String,
    /// Also drains a backlog of this many events through inbox mode on each SQL store (0: no)
    #[arg(
        long,
        value_name = "EVENTS",
        env = "SANGHO_LOAD_DRAIN",
        default_value_t = 0
    )]
    drain: usize,
    /// With --drain: the events of the backlog belong to this many objects, keyed by object
    /// (their events taken one at a time); 0: no ordering keys
    #[arg(
        long,
        value_name = "KEYS",
        env = "SANGHO_LOAD_DRAIN_KEYS",
        default_value_t = 0
    )]
    drain_keys: usize,
    /// With --drain: the workers that drain the backlog (as many as the store's pool has
    /// connections for: 16 on each SQL store)
    #[arg(
        long,
        value_name = "N",
        env = "SANGHO_LOAD_DRAIN_WORKERS",
        default_value_t = 16
    )]
    drain_workers: usize,
    /// The workers that run beside inbox mode's receipts ("workers running")
    #[arg(
        long,
        value_name = "N",
        env = "SANGHO_LOAD_RUNNING_WORKERS",
        default_value_t = 4
    )]
    running_workers: usize,
    /// With --drain: 1 takes every due event in the order of receipt (`TakeOrder::Receipt`),
    /// 0 new events first (`TakeOrder::FreshFirst`, the default)
    #[arg(
        long,
        value_name = "0|1",
        env = "SANGHO_LOAD_RECEIPT_ORDER",
        default_value = "0"
    )]
    receipt_order: String,
    /// The most writes per group commit of the SQLite, PostgreSQL and MariaDB stores [default:
    /// GroupCommit::SQLITE's, GroupCommit::POSTGRES's, GroupCommit::MARIADB's]
    #[arg(long, value_name = "N", env = "SANGHO_LOAD_GROUP_MAX")]
    group_max: Option<usize>,
    /// The PostgreSQL store's group commit writers (GroupCommit::POSTGRES's two by default);
    /// 0: the store's default
    #[arg(
        long,
        value_name = "N",
        env = "SANGHO_LOAD_PG_GROUP",
        default_value_t = 0
    )]
    pg_group: usize,
    /// The MariaDB store's group commit writers (GroupCommit::MARIADB's two by default); 0: the
    /// store's default
    #[arg(
        long,
        value_name = "N",
        env = "SANGHO_LOAD_MARIADB_GROUP",
        default_value_t = 0
    )]
    mariadb_group: usize,
    /// 1 measures the MariaDB store's layer with its default grouping (every write but the
    /// claims) instead of GroupCommit::MARIADB's (every write, opt-in)
    #[arg(
        long,
        value_name = "0|1",
        env = "SANGHO_LOAD_MARIADB_DEFAULT",
        default_value = "0"
    )]
    mariadb_default: String,
    /// 0 leaves out inbox mode's receipt (workers stopped, then running) on the SQL stores
    #[arg(
        long,
        value_name = "0|1",
        env = "SANGHO_LOAD_INBOX",
        default_value = "1"
    )]
    inbox: String,
}

/// How the harness sets the stores' group commit.
#[derive(Debug, Clone, Copy)]
struct Grouping {
    max: Option<usize>,
    postgres_writers: usize,
    mariadb_writers: usize,
    /// The MariaDB store's default grouping instead of `GroupCommit::MARIADB`.
    mariadb_default: bool,
}

impl Grouping {
    /// A store's `default` group commit with the harness's bound, and `writers` (0: the
    /// default's).
    fn applied(&self, default: GroupCommit, writers: usize) -> GroupCommit {
        let settings = match writers {
            0 => default,
            writers => default.with_writers(writers),
        };
        match self.max {
            Some(max) => settings.with_max_operations(max),
            None => settings,
        }
    }
}

async fn main_async(args: Args) -> Result<(), BoxError> {
    let grouping = Grouping {
        max: args.group_max,
        postgres_writers: args.pg_group,
        mariadb_writers: args.mariadb_group,
        mariadb_default: args.mariadb_default != "0",
    };
    let full = !args.quick;
    let seconds = args.seconds.unwrap_or(if full { 1.0 } else { 0.2 });
    let connections = args.connections.unwrap_or(if full { 64 } else { 4 });
    let rounds = args.rounds.unwrap_or(if full { 5 } else { 1 });
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

    let in_memory = args.in_memory != "0";
    let inboxes = args.inbox != "0";
    let kinds = Kind::selected(args.stores.as_deref())?;
    eprintln!(
        "database stores: {:?}; variants without a database: {}",
        kinds.iter().map(|kind| kind.name()).collect::<Vec<_>>(),
        if in_memory { "yes" } else { "no" }
    );

    let mut failed = Vec::new();
    // Each store's inbox receipt over HTTP with unique events and the workers stopped (median
    // requests/s), to which its drain is compared.
    let mut http_receipts: HashMap<&str, f64> = HashMap::new();
    for (mix, load) in [
        ("unique events", unique),
        ("20% redeliveries", redeliveries),
    ] {
        eprintln!("{mix}:");
        let mut backends = Vec::with_capacity(kinds.len());
        for kind in &kinds {
            backends.push(kind.open(grouping).await?);
        }
        // The variants take turns, round after round, so that the machine's background load
        // falls on all of them alike.
        let (mut baseline, mut by_hand, mut null, mut moka) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Per backend: the layer's rounds, the raw recipe's rounds.
        let mut on_stores: Vec<(Vec<RunResult>, Vec<RunResult>)> =
            backends.iter().map(|_| (Vec::new(), Vec::new())).collect();
        // Per backend with an inbox: its receipt's rounds, workers stopped and running.
        let mut on_inboxes: Vec<(Vec<RunResult>, Vec<RunResult>)> =
            backends.iter().map(|_| (Vec::new(), Vec::new())).collect();
        // Per backend with group commit: the layer's and the receipt's (workers stopped)
        // rounds with it off.
        let mut ungrouped_rounds: Vec<(Vec<RunResult>, Vec<RunResult>)> =
            backends.iter().map(|_| (Vec::new(), Vec::new())).collect();
        for _ in 0..rounds {
            if in_memory {
                baseline.push(run(Variant::Bare, load).await?);
                by_hand.push(run(Variant::ByHand, load).await?);
                let layer = layer_with(NullStore)?;
                null.push(run(Variant::LayerNullStore(layer), load).await?);
                let layer = layer_with(MokaStore::new())?;
                moka.push(run(Variant::Layer(layer), load).await?);
            }
            for (((backend, (layered, raw)), (stopped, working)), (layered_off, stopped_off)) in
                backends
                    .iter()
                    .zip(&mut on_stores)
                    .zip(&mut on_inboxes)
                    .zip(&mut ungrouped_rounds)
            {
                let layer = layer_with(backend.store.clone())?;
                layered.push(run(Variant::Layer(layer), load).await?);
                raw.push(run(Variant::Recipe(backend.recipe.clone()), load).await?);
                if let Some((store, inbox)) = &backend.ungrouped {
                    let layer = layer_with(store.clone())?;
                    layered_off.push(run(Variant::Layer(layer), load).await?);
                    if inboxes {
                        stopped_off.push(run_inbox(inbox, None, load).await?);
                    }
                }
                if let Some(inbox) = &backend.inbox
                    && inboxes
                {
                    stopped.push(run_inbox(inbox, None, load).await?);
                    let workers = Some(args.running_workers);
                    working.push(run_inbox(inbox, workers, load).await?);
                }
            }
        }
        let names: Vec<(&str, &str)> = backends
            .iter()
            .map(|backend| (backend.name, backend.store_name))
            .collect();
        for backend in backends {
            (backend.cleanup)().await?;
        }

        let reference = in_memory.then(|| {
            let baseline = Summary::of(&baseline);
            baseline.print("without the layer");
            let by_hand = Summary::of(&by_hand);
            by_hand.print("verified + parsed by hand");
            eprintln!(
                "  => by hand (no deduplication) / without: {:.3}x requests/s",
                by_hand.requests_per_second / baseline.requests_per_second
            );
            (baseline, by_hand)
        });
        let in_memory_rounds = [
            ("NullStore: no dedup".to_owned(), &null),
            ("MokaStore".to_owned(), &moka),
        ];
        let store_rounds = names
            .iter()
            .zip(&on_stores)
            .map(|((_, store_name), (layered, _))| ((*store_name).to_owned(), layered));
        for (label, rounds) in in_memory_rounds.into_iter().chain(store_rounds) {
            if rounds.is_empty() {
                continue;
            }
            let layered = Summary::of(rounds);
            layered.print(&format!("with the layer ({label})"));
            let what = format!("{mix}, {label}");
            match &reference {
                Some((baseline, by_hand)) => {
                    report_pair(baseline, &layered, &mut failed, &what);
                    eprintln!(
                        "     with the layer / by hand: {:.3}x requests/s",
                        layered.requests_per_second / by_hand.requests_per_second
                    );
                }
                None => check(&layered, &mut failed, &what),
            }
        }
        for (
            (((name, store_name), (layered, raw)), (stopped, working)),
            (layered_off, stopped_off),
        ) in names
            .iter()
            .zip(&on_stores)
            .zip(&on_inboxes)
            .zip(&ungrouped_rounds)
        {
            let recipe = Summary::of(raw);
            recipe.print(&format!("raw recipe ({name})"));
            check(&recipe, &mut failed, &format!("{mix}, raw recipe ({name})"));
            report_against_recipe(name, "layer", layered, raw);
            for (what, off, on) in [
                ("layer", layered_off, layered),
                ("inbox receipt, workers stopped", stopped_off, stopped),
            ] {
                if off.is_empty() {
                    continue;
                }
                let summary = Summary::of(off);
                summary.print(&format!("{what}, group commit off ({store_name})"));
                check(
                    &summary,
                    &mut failed,
                    &format!("{mix}, {what}, group commit off ({name})"),
                );
                report_against_recipe(name, &format!("{what}, group commit off"), off, raw);
                report_against(name, what, "group commit off", on, off);
            }
            for (label, rounds) in [("workers stopped", stopped), ("workers running", working)] {
                if rounds.is_empty() {
                    continue;
                }
                let receipt = Summary::of(rounds);
                receipt.print(&format!("inbox receipt ({store_name}, {label})"));
                check(
                    &receipt,
                    &mut failed,
                    &format!("{mix}, inbox receipt ({name}, {label})"),
                );
                report_against_recipe(name, &format!("inbox receipt, {label}"), rounds, raw);
                if label == "workers stopped" && mix == "unique events" {
                    http_receipts.insert(*name, receipt.requests_per_second);
                }
                if label == "workers running" {
                    report_processed_against_recipe(name, rounds, raw);
                }
            }
        }
    }
    if args.drain > 0 {
        eprintln!("inbox drain:");
        for kind in &kinds {
            let backend = kind.open(grouping).await?;
            if let Some(inbox) = &backend.inbox {
                let drain_rate = drain(
                    backend.name,
                    inbox,
                    args.drain,
                    args.drain_keys,
                    args.drain_workers,
                    match args.receipt_order.as_str() {
                        "1" => TakeOrder::Receipt,
                        _ => TakeOrder::FreshFirst,
                    },
                )
                .await?;
                if let Some(receipt) = http_receipts.get(backend.name) {
                    eprintln!(
                        "  => {}: drain / inbox receipt over HTTP (workers stopped, unique events) = {:.2}x",
                        backend.name,
                        drain_rate / receipt
                    );
                }
            }
            (backend.cleanup)().await?;
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; ").into())
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(main_async(args))
}
