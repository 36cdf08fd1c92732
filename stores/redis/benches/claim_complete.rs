//! Claim + complete of fresh events, 32 at a time, side by side:
//!
//! - `raw_set_nx_then_set`: the two commands a hand-written dedup uses, with the raw redis
//!   crate: `SET key 1 NX PX <lease>`, then `SET key completed PX <retention>` (no owner
//!   check: the baseline of the target);
//! - `raw_token_then_set`: the baseline plus the claim's owner token and `GET` (`SET key <token>
//!   NX PX <lease> GET`, a fresh `ClaimToken` each time), still without an owner check on
//!   completion: what the token costs;
//! - `raw_owner_checked`: the same guarantees as the store, written by hand: `SET key <token>
//!   NX PX <lease> GET`, then the owner-checked completion script by `EVALSHA`;
//! - `redis_store`: [`RedisStore::claim`] then [`RedisStore::complete`].
//!
//! Each runs over its own connection built with `RedisStore::manager_config()`: the raw
//! variants over a `ConnectionManager`, the store over the `HealingConnection` that
//! `RedisStore::connect` builds. After
//! the criterion group, the variants run again in interleaved rounds (so that the load of a
//! shared machine hits them alike), and the median ratios are printed.
//!
//! Needs the Redis of `SANGHO_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`):
//! `cargo bench -p sangho-webhook-redis`. Keys go under a prefix of this run, retained 60 s,
//! and are deleted at the end.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sangho_webhook::store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore};
use sangho_webhook_redis::{
    HealingConnection, RedisStore,
    redis::{self, Script, aio::ConnectionManager},
};
use tokio::runtime::Runtime;

const CONCURRENCY: u64 = 32;
const LEASE_MS: u64 = 30_000;
const RETENTION_MS: u64 = 60_000;
const TYPE: &str = "payment_intent.succeeded";
/// Interleaved rounds after the criterion group, and operations per variant and round.
const ROUNDS: usize = 40;
const OPERATIONS_PER_ROUND: u64 = 10_000;

fn redis_url() -> String {
    std::env::var("SANGHO_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

async fn manager() -> redis::RedisResult<ConnectionManager> {
    let client = redis::Client::open(redis_url())?;
    ConnectionManager::new_with_config(client, RedisStore::manager_config()).await
}

/// The variants, each with its own connection manager and key prefix.
#[derive(Clone)]
struct Variants {
    raw: ConnectionManager,
    checked: ConnectionManager,
    script: Arc<Script>,
    store: RedisStore,
    prefix: Arc<str>,
    /// A random tag of this run, and the id counter.
    run: Arc<str>,
    ids: Arc<AtomicU64>,
}

#[derive(Clone, Copy, Debug)]
enum Variant {
    RawSetNxThenSet,
    RawTokenThenSet,
    RawOwnerChecked,
    RedisStore,
}

impl Variant {
    const ALL: [Self; 4] = [
        Self::RawSetNxThenSet,
        Self::RawTokenThenSet,
        Self::RawOwnerChecked,
        Self::RedisStore,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::RawSetNxThenSet => "raw_set_nx_then_set",
            Self::RawTokenThenSet => "raw_token_then_set",
            Self::RawOwnerChecked => "raw_owner_checked",
            Self::RedisStore => "redis_store",
        }
    }
}

impl Variants {
    /// An event id never used before in this run: the run's random tag and a counter (shared by
    /// every iteration, variant and task), so that no criterion iteration reuses a key.
    fn fresh_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        format!("evt_{}_{n}", self.run)
    }

    /// One claim + complete of the fresh event `id`.
    async fn run(&self, variant: Variant, id: &str) {
        match variant {
            Variant::RawSetNxThenSet => {
                let mut connection = self.raw.clone();
                let key = format!("{}raw:{id}", self.prefix);
                let acquired: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg("1")
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE_MS)
                    .query_async(&mut connection)
                    .await
                    .expect("SET NX PX");
                assert!(acquired.is_some(), "a fresh key is set");
                redis::cmd("SET")
                    .arg(&key)
                    .arg("completed")
                    .arg("PX")
                    .arg(RETENTION_MS)
                    .exec_async(&mut connection)
                    .await
                    .expect("SET completed PX");
            }
            Variant::RawTokenThenSet | Variant::RawOwnerChecked => {
                let mut connection = self.checked.clone();
                let key = format!("{}checked:{id}", self.prefix);
                let token = ClaimToken::generate();
                let previous: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(token.as_str())
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE_MS)
                    .arg("GET")
                    .query_async(&mut connection)
                    .await
                    .expect("SET NX PX GET");
                assert!(previous.is_none(), "a fresh key is set");
                if matches!(variant, Variant::RawTokenThenSet) {
                    redis::cmd("SET")
                        .arg(&key)
                        .arg("completed")
                        .arg("PX")
                        .arg(RETENTION_MS)
                        .exec_async(&mut connection)
                        .await
                        .expect("SET completed PX");
                } else {
                    let completed: i64 = self
                        .script
                        .key(&key)
                        .arg(token.as_str())
                        .arg(RETENTION_MS)
                        .invoke_async(&mut connection)
                        .await
                        .expect("the completion script");
                    assert_eq!(completed, 1);
                }
            }
            Variant::RedisStore => {
                let (lease, token) = (Duration::from_millis(LEASE_MS), ClaimToken::generate());
                match self
                    .store
                    .claim(Claimant::new(id, TYPE, &token), lease)
                    .await
                {
                    Ok(Claim::Acquired) => {
                        let retention = Duration::from_millis(RETENTION_MS);
                        let completed = self
                            .store
                            .complete(Claimant::new(id, TYPE, &token), retention)
                            .await;
                        assert!(
                            matches!(completed, Ok(Completion::Recorded)),
                            "{completed:?}"
                        );
                    }
                    other => panic!("a fresh event is acquired: {other:?}"),
                }
            }
        }
    }

    /// Runs `iters` claim + complete of fresh events over [`CONCURRENCY`] tasks; answers the
    /// wall time.
    async fn concurrently(&self, variant: Variant, iters: u64) -> Duration {
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..CONCURRENCY {
            let count = iters / CONCURRENCY + u64::from(task < iters % CONCURRENCY);
            let variants = self.clone();
            tasks.spawn(async move {
                for _ in 0..count {
                    variants.run(variant, &variants.fresh_id()).await;
                }
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a benchmark task panicked");
        }
        started.elapsed()
    }
}

fn claim_complete(c: &mut Criterion) {
    let runtime = Runtime::new().expect("a tokio runtime");
    let managers = runtime.block_on(async {
        let client = redis::Client::open(redis_url())?;
        let store = HealingConnection::new(client, RedisStore::manager_config()).await?;
        Ok::<_, redis::RedisError>((manager().await?, manager().await?, store))
    });
    let (raw, checked, store_connection) = match managers {
        Ok(managers) => managers,
        Err(error) => {
            eprintln!(
                "skipping the Redis benchmark: no Redis at {}: {error}",
                redis_url()
            );
            return;
        }
    };
    // A token starts with 16 random hex digits drawn once per process: random per run.
    let run: Arc<str> = ClaimToken::generate().as_str()[..16].into();
    let prefix: Arc<str> = format!("sangho:bench:{run}:").into();
    let variants = Variants {
        raw,
        checked,
        // The store's completion script, written out again.
        script: Arc::new(Script::new(
            "#!lua\nlocal value = redis.call('GET', KEYS[1])\nlocal completed = 'completed:' .. ARGV[1]\nif value == false or value == ARGV[1] or value == completed then\n  redis.call('SET', KEYS[1], completed, 'PX', ARGV[2])\n  return 1\nend\nreturn 0\n",
        )),
        store: RedisStore::new(store_connection).with_prefix(format!("{prefix}store:")),
        prefix: prefix.clone(),
        run,
        ids: Arc::new(AtomicU64::new(0)),
    };

    let mut group = c.benchmark_group("redis_claim_complete_32_concurrent");
    group.throughput(Throughput::Elements(1));
    for variant in Variant::ALL {
        group.bench_function(variant.name(), |b| {
            b.to_async(&runtime)
                .iter_custom(|iters| variants.concurrently(variant, iters));
        });
    }
    group.finish();

    let test_mode = std::env::args().any(|arg| arg == "--test" || arg == "--list");
    if !test_mode {
        runtime.block_on(interleaved(&variants));
    }
    runtime.block_on(async {
        if let Err(error) = delete_prefix(&mut variants.raw.clone(), &prefix).await {
            eprintln!("could not delete {prefix}*: {error}");
        }
    });
}

/// Runs the variants in alternation, [`ROUNDS`] times, and prints each one's median
/// throughput and the median of the per-round ratios to the baseline.
async fn interleaved(variants: &Variants) {
    let mut throughputs = vec![Vec::with_capacity(ROUNDS); Variant::ALL.len()];
    for _ in 0..ROUNDS {
        for (index, variant) in Variant::ALL.into_iter().enumerate() {
            let elapsed = variants.concurrently(variant, OPERATIONS_PER_ROUND).await;
            throughputs[index].push(OPERATIONS_PER_ROUND as f64 / elapsed.as_secs_f64());
        }
    }
    println!(
        "interleaved: {ROUNDS} rounds of {OPERATIONS_PER_ROUND} claim+complete per variant, \
         {CONCURRENCY} concurrent"
    );
    for (index, variant) in Variant::ALL.into_iter().enumerate() {
        let ratios: Vec<f64> = (0..ROUNDS)
            .map(|round| throughputs[index][round] / throughputs[0][round])
            .collect();
        println!(
            "  {:<22} median {:>8.0} claim+complete/s, median ratio to {} {:.3}",
            variant.name(),
            median(throughputs[index].clone()),
            Variant::RawSetNxThenSet.name(),
            median(ratios),
        );
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn delete_prefix(connection: &mut ConnectionManager, prefix: &str) -> redis::RedisResult<()> {
    let mut cursor = 0_u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(connection)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .exec_async(connection)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8))
        .sample_size(20);
    targets = claim_complete
}
criterion_main!(benches);
