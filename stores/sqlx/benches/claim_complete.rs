//! Claim + complete of fresh events, 32 at a time, through `PostgresStore` / `SqliteStore`
//! and through the provider's documented recipe written by hand with raw sqlx on the same pool: `SELECT` the
//! id, then `INSERT … ON CONFLICT (event_id) DO NOTHING` (two round trips, and racy: that is
//! what the store fixes). Side by side, one criterion group per database.
//!
//! The store's claims are durable by default (two flushed commits per event, the claim's and
//! the completion's, where the raw recipe has one); for PostgreSQL a third line shows the
//! store with `with_asynchronous_claims(true)` (one flushed commit per event).
//!
//! Every operation uses a fresh event id: a random prefix per run and a counter.
//!
//! After each criterion group, an interleaved comparison (the variants take turns, round after
//! round) prints medians and throughput ratios that a busy, shared machine disturbs less.
//!
//! `cargo bench -p sangho-webhook-sqlx` (PostgreSQL from `SANGHO_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`, skipped when unreachable; SQLite in a temporary
//! file). Each variant writes to a table of its own, created for the run and dropped after it.

use std::{
    future::Future,
    hash::{BuildHasher, RandomState},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sangho_webhook::store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore};
use sangho_webhook_sqlx::{
    PostgresStore, SqliteStore,
    sqlx::{
        self, AssertSqlSafe, Database, Pool, postgres::PgPoolOptions, sqlite::SqlitePoolOptions,
    },
};
use tokio::runtime::Runtime;

const CONCURRENCY: u64 = 32;
/// Rounds of the interleaved comparison, and operations per round and variant.
const ROUNDS: usize = 15;
const ROUND_OPS: u64 = 1_000;
const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);
const TYPE: &str = "payment_intent.succeeded";

/// One claim + complete of a fresh event through the store.
async fn through_store(store: &dyn IdempotencyStore, id: &str) {
    let token = ClaimToken::generate();
    match store.claim(Claimant::new(id, TYPE, &token), LEASE).await {
        Ok(Claim::Acquired) => {
            let completed = store
                .complete(Claimant::new(id, TYPE, &token), RETENTION)
                .await;
            assert!(
                matches!(completed, Ok(Completion::Recorded)),
                "{completed:?}"
            );
        }
        other => panic!("a fresh event is acquired: {other:?}"),
    }
}

/// The provider's documented recipe: is it there? No: (process it, then) record it.
async fn by_hand<DB>(pool: &Pool<DB>, select: &Arc<str>, insert: &Arc<str>, id: &str)
where
    DB: Database,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as Database>::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
{
    let seen: Option<(String,)> = sqlx::query_as(AssertSqlSafe(select.clone()))
        .bind(id)
        .fetch_optional(pool)
        .await
        .expect("SELECT");
    assert!(seen.is_none(), "a fresh event is unknown");
    sqlx::query(AssertSqlSafe(insert.clone()))
        .bind(id)
        .bind(TYPE)
        .execute(pool)
        .await
        .expect("INSERT ON CONFLICT DO NOTHING");
}

/// Runs `iters` operations spread over [`CONCURRENCY`] tasks; answers the wall time.
async fn concurrently<F, Fut>(iters: u64, operation: F) -> Duration
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let operation = Arc::new(operation);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..CONCURRENCY {
        let count = iters / CONCURRENCY + u64::from(task < iters % CONCURRENCY);
        let operation = operation.clone();
        tasks.spawn(async move {
            for _ in 0..count {
                operation().await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("a benchmark task panicked");
    }
    started.elapsed()
}

/// This run's prefix of every event id: random, so that runs sharing a table never collide.
fn run_prefix() -> u64 {
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PREFIX
        .get_or_init(|| RandomState::new().hash_one((std::process::id(), SystemTime::now())) >> 16)
}

/// A fresh event id: the run's random prefix and a counter that every operation of the run
/// advances, so that no two iterations (nor two criterion samples) ever share an id.
fn event_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "evt_{:012x}_{}",
        run_prefix(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The two variants of one database, side by side.
fn compare<DB, S>(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    stores: Vec<(&str, S)>,
    pool: Pool<DB>,
    raw_table: &str,
) where
    DB: Database,
    S: IdempotencyStore + Clone,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as Database>::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
{
    let placeholders = if name == "postgres" {
        ("$1", "$2")
    } else {
        ("?1", "?2")
    };
    let select: Arc<str> = format!(
        "SELECT event_id FROM {raw_table} WHERE event_id = {}",
        placeholders.0
    )
    .into();
    let insert: Arc<str> = format!(
        "INSERT INTO {raw_table} (event_id, event_type) VALUES ({}, {}) ON CONFLICT (event_id) DO NOTHING",
        placeholders.0, placeholders.1
    )
    .into();

    let mut group = c.benchmark_group(format!("{name}_claim_complete_32_concurrent"));
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw_select_then_insert_on_conflict", |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (pool, select, insert) = (pool.clone(), select.clone(), insert.clone());
            concurrently(iters, move || {
                let (pool, select, insert) = (pool.clone(), select.clone(), insert.clone());
                let id = event_id();
                async move { by_hand(&pool, &select, &insert, &id).await }
            })
        });
    });
    for (variant, store) in &stores {
        group.bench_function(*variant, |b| {
            b.to_async(runtime).iter_custom(|iters| {
                let store = store.clone();
                concurrently(iters, move || {
                    let store = store.clone();
                    let id = event_id();
                    async move { through_store(&store, &id).await }
                })
            });
        });
    }
    group.finish();

    // The same, interleaved: rounds of ROUND_OPS operations, the variants taking turns, so
    // that the load of a shared machine falls on all of them alike; medians per variant.
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); stores.len() + 1];
    for _ in 0..ROUNDS {
        let (pool, select, insert) = (pool.clone(), select.clone(), insert.clone());
        times[0].push(runtime.block_on(concurrently(ROUND_OPS, move || {
            let (pool, select, insert) = (pool.clone(), select.clone(), insert.clone());
            let id = event_id();
            async move { by_hand(&pool, &select, &insert, &id).await }
        })));
        for (variant, (_, store)) in stores.iter().enumerate() {
            let store = store.clone();
            times[variant + 1].push(runtime.block_on(concurrently(ROUND_OPS, move || {
                let store = store.clone();
                let id = event_id();
                async move { through_store(&store, &id).await }
            })));
        }
    }
    let per_op: Vec<f64> = times
        .iter_mut()
        .map(|rounds| {
            rounds.sort();
            rounds[rounds.len() / 2].as_secs_f64() * 1e6 / ROUND_OPS as f64
        })
        .collect();
    println!(
        "{name} interleaved ({ROUNDS} rounds of {ROUND_OPS}, {CONCURRENCY} concurrent, medians): \
         raw_select_then_insert_on_conflict {:.1} µs/op",
        per_op[0]
    );
    for (variant, (label, _)) in stores.iter().enumerate() {
        println!(
            "{name} interleaved: {label} {:.1} µs/op, throughput {:.2}x the raw recipe's",
            per_op[variant + 1],
            per_op[0] / per_op[variant + 1]
        );
    }
}

/// the provider's documented schema, for the raw recipe's table.
fn seed_schema(table: &str, timestamp_default: &str) -> String {
    format!(
        "CREATE TABLE {table} (
           event_id     VARCHAR(50)  PRIMARY KEY,
           event_type   VARCHAR(100) NOT NULL,
           processed_at TIMESTAMP    DEFAULT {timestamp_default}
         );
         CREATE INDEX {table}_processed_at_idx ON {table} (processed_at);"
    )
}

fn postgres(c: &mut Criterion, runtime: &Runtime) {
    let url = std::env::var("SANGHO_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match runtime.block_on(
        PgPoolOptions::new()
            .max_connections(CONCURRENCY as u32)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url),
    ) {
        Ok(pool) => pool,
        Err(error) => {
            eprintln!("skipping the PostgreSQL benchmark: no database at {url}: {error}");
            return;
        }
    };
    let run = format!("{:012x}", run_prefix());
    let (store_table, raw_table) = (
        format!("sangho_bench_{run}_store"),
        format!("sangho_bench_{run}_raw"),
    );
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&store_table)
        .expect("a valid table name");
    runtime.block_on(async {
        store.migrate().await.expect("migrate");
        sqlx::raw_sql(AssertSqlSafe(seed_schema(&raw_table, "NOW()")))
            .execute(&pool)
            .await
            .expect("the provider's table");
    });

    let asynchronous = store.clone().with_asynchronous_claims(true);
    let stores = vec![
        ("store_claim_then_complete", store),
        ("store_with_asynchronous_claims", asynchronous),
    ];
    compare(c, runtime, "postgres", stores, pool.clone(), &raw_table);

    runtime.block_on(async {
        for table in [store_table, raw_table] {
            if let Err(error) = sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE {table}")))
                .execute(&pool)
                .await
            {
                eprintln!("could not drop {table}: {error}");
            }
        }
        pool.close().await;
    });
}

fn sqlite(c: &mut Criterion, runtime: &Runtime) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // As `SqliteStore::connect` configures it.
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let options = SqliteStore::connect_options(&url).expect("a valid URL");
    let pool = runtime
        .block_on(
            SqlitePoolOptions::new()
                .max_connections(SqliteStore::MAX_CONNECTIONS)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options),
        )
        .expect("a SQLite file");
    let store = SqliteStore::new(pool.clone());
    let raw_table = "seed_webhook_events";
    runtime.block_on(async {
        store.migrate().await.expect("migrate");
        sqlx::raw_sql(AssertSqlSafe(seed_schema(raw_table, "CURRENT_TIMESTAMP")))
            .execute(&pool)
            .await
            .expect("the provider's table");
    });

    let stores = vec![("store_claim_then_complete", store)];
    compare(c, runtime, "sqlite", stores, pool.clone(), raw_table);
    runtime.block_on(pool.close());
}

fn claim_complete(c: &mut Criterion) {
    let runtime = Runtime::new().expect("a tokio runtime");
    postgres(c, &runtime);
    sqlite(c, &runtime);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10));
    targets = claim_complete
}
criterion_main!(benches);
