//! Test bodies every dialect runs: each dialect's file calls them from a `#[tokio::test]` of its
//! own (with its `#[ignore]`), and supplies the dialect's SQL through [`TestDatabase`].

use std::{
    collections::BTreeSet,
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use http::StatusCode;
use sangho_webhook::{
    store::{Claim, Claimant, Completion, IdempotencyStore, Renewal, StoreError},
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_sqlx::{
    Purge, PurgeTask, TableName,
    sqlx::{self, AssertSqlSafe, Database, Executor, FromRow, IntoArguments, Pool},
};

use super::{LONG, TYPE, acquire, builder, claim, complete, layer, secret};

/// The database under a store of this crate, as the shared bodies see it: the store's pool and
/// table, and the dialect's SQL for the rows a test writes (and reads) by hand. Not the crate's
/// `SqlStore` type: each store type implements it in `common`.
#[async_trait]
pub trait TestDatabase: IdempotencyStore + Purge {
    /// The store's database.
    type Db: Database;

    fn pool(&self) -> &Pool<Self::Db>;
    fn table(&self) -> &TableName;
    async fn migrate(&self) -> Result<(), sangho_webhook_sqlx::Error>;
    /// The store's own `spawn_purge`.
    fn spawn_purge(&self, retention: Duration, period: Duration) -> PurgeTask;
    /// Moves the `processed_at` of event `id` four days back.
    async fn backdate(&self, id: &str);
    /// Inserts event `id` as the provider's documented recipe does (no state of its own), processed four days
    /// ago when `old`, now otherwise.
    async fn insert_seed_row(&self, id: &str, old: bool);
    /// The ids of every row of the table.
    async fn event_ids(&self) -> BTreeSet<String>;
    /// The provider's documented schema in this dialect, for `table`: the table and its
    /// `processed_at` index.
    fn provider_schema(table: &str) -> String;
    /// Runs `script` (several statements) on the store's pool.
    async fn run_script(&self, script: &str);
    /// The declared type of `column`, in lower case.
    async fn column_type(&self, column: &str) -> String;
    /// Inserts `rows` completed events whose retention ran out a day ago.
    async fn insert_expired_rows(&self, rows: u64);
    /// The ids of every row of the table, or `None` if there is no table.
    async fn event_ids_or_none(&self) -> Option<BTreeSet<String>> {
        if self.column_type("event_id").await.is_empty() {
            None
        } else {
            Some(self.event_ids().await)
        }
    }
}

/// A table name that contains the default one, unique to this run: `processed_webhook_events_<16 hex>`.
pub fn table_named_after_the_default() -> String {
    format!("processed_webhook_events_{:016x}", super::unique())
}

/// `store` is on a table created with the provider's documented schema and holding rows
/// written by its recipe: `migrate` adopts it (twice), the provider's columns keep their
/// types, a recent row counts as completed, a row older than the adopted retention is
/// forgotten, and new events are processed.
pub async fn migrate_adopts_a_table_of_the_provider_schema<S: TestDatabase>(store: &S) {
    store
        .run_script(&S::provider_schema(store.table().as_str()))
        .await;
    let types_before = (
        store.column_type("event_id").await,
        store.column_type("event_type").await,
        store.column_type("processed_at").await,
    );
    let (recent, old) = (unique_event_id("recent"), unique_event_id("old"));
    store.insert_seed_row(&recent, false).await;
    store.insert_seed_row(&old, true).await;

    store.migrate().await.expect("the table is adopted");
    store.migrate().await.expect("migrate runs again");

    let types_after = (
        store.column_type("event_id").await,
        store.column_type("event_type").await,
        store.column_type("processed_at").await,
    );
    assert_eq!(
        types_after, types_before,
        "the provider's columns keep their types"
    );
    assert_eq!(claim(store, &recent, LONG).await.unwrap(), Claim::Completed);
    // Four days old: past the 72-hour adopted retention.
    let token = acquire(store, &old, LONG).await;
    assert_eq!(
        complete(store, &old, &token, LONG).await,
        Completion::Recorded
    );
    let new = unique_event_id("new");
    let token = acquire(store, &new, LONG).await;
    assert_eq!(
        complete(store, &new, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(claim(store, &new, LONG).await.unwrap(), Claim::Completed);
}

/// `store` is on a table of its name that is no idempotency table: `migrate` refuses it,
/// naming the table and the missing columns, and leaves it as it is.
pub async fn migrate_refuses_a_table_without_the_event_columns<S: TestDatabase>(store: &S) {
    let table = store.table().as_str().to_owned();
    store
        .run_script(&format!(
            "CREATE TABLE {table} (id INTEGER PRIMARY KEY, payload VARCHAR(20))"
        ))
        .await;
    let error = store
        .migrate()
        .await
        .expect_err("an unusable table is refused");
    match &error {
        sangho_webhook_sqlx::Error::IncompatibleTable {
            table: named,
            missing,
        } => {
            assert_eq!(named, &table);
            assert_eq!(missing, &["event_id", "event_type"]);
        }
        other => panic!("expected IncompatibleTable, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&table) && message.contains("event_id") && message.contains("event_type"),
        "{message}"
    );
    assert_eq!(
        store.column_type("state").await,
        "",
        "the table is left alone"
    );
}

/// The ids of every row of `table`: [`TestDatabase::event_ids`] for any dialect.
pub async fn event_ids<DB: Database>(pool: &Pool<DB>, table: &TableName) -> BTreeSet<String>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    (String,): for<'r> FromRow<'r, DB::Row>,
    DB::Arguments: IntoArguments<DB>,
{
    let rows: Vec<(String,)> =
        sqlx::query_as(AssertSqlSafe(format!("SELECT event_id FROM {table}")))
            .fetch_all(pool)
            .await
            .expect("read the table");
    rows.into_iter().map(|(id,)| id).collect()
}

/// 200 concurrent claims of one event through a pool whose 16 connections are all open:
/// exactly one is acquired, none fails. Answers the event id.
pub async fn two_hundred_concurrent_claims_through_sixteen_connections_acquire_once<S>(
    store: S,
) -> Arc<str>
where
    S: TestDatabase + Clone,
{
    // Open all sixteen connections before the race.
    let mut warm = Vec::new();
    for _ in 0..16 {
        warm.push(store.pool().acquire().await.expect("a connection"));
    }
    drop(warm);
    assert_eq!(store.pool().size(), 16);

    let id: Arc<str> = unique_event_id("race").into();
    let barrier = Arc::new(tokio::sync::Barrier::new(200));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            claim(&store, &id, LONG).await
        });
    }
    let (mut acquired, mut in_flight) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined
            .expect("claim task")
            .expect("no claim fails under concurrency")
        {
            Claim::Acquired => acquired += 1,
            Claim::InFlight => in_flight += 1,
            other => panic!("nothing was completed: {other:?}"),
        }
    }
    assert_eq!((acquired, in_flight), (1, 199));
    id
}

/// A completed event, its pool closed, and the table opened again by `reopen` (a new pool):
/// still a duplicate.
pub async fn completed_event_is_a_duplicate_after_the_pool_is_reopened<S, F>(
    store: &S,
    reopen: impl FnOnce() -> F,
) where
    S: TestDatabase,
    F: Future<Output = S>,
{
    let id = unique_event_id("reopen");
    let token = acquire(store, &id, LONG).await;
    assert_eq!(
        complete(store, &id, &token, LONG).await,
        Completion::Recorded
    );
    store.pool().close().await;
    assert!(
        claim(store, &id, LONG).await.is_err(),
        "the old pool is closed"
    );

    let reopened = reopen().await;
    reopened.migrate().await.unwrap();
    assert_eq!(claim(&reopened, &id, LONG).await.unwrap(), Claim::Completed);
}

/// The purge deletes exactly the rows past their own expiry (a completion past its
/// retention, a claim past its lease) and the rows another tool wrote without an expiry more
/// than the retention (72 h) ago; never a live record, however old its `processed_at`.
pub async fn purge_removes_exactly_the_rows_past_their_own_expiry<S: TestDatabase>(store: &S) {
    const SHORT: Duration = Duration::from_millis(10);
    // Removed.
    let expired = unique_event_id("expired");
    let token = acquire(store, &expired, LONG).await;
    assert_eq!(
        complete(store, &expired, &token, SHORT).await,
        Completion::Recorded
    );
    let abandoned = unique_event_id("abandoned");
    acquire(store, &abandoned, SHORT).await;
    let foreign_old = unique_event_id("foreignold");
    store.insert_seed_row(&foreign_old, true).await;

    // Kept: a completion within its retention (even one claimed four days ago), a live claim
    // (even one claimed four days ago), a recent row of another tool.
    let completed = unique_event_id("completed");
    let token = acquire(store, &completed, LONG).await;
    assert_eq!(
        complete(store, &completed, &token, LONG).await,
        Completion::Recorded
    );
    let completed_long_ago = unique_event_id("compold");
    let token = acquire(store, &completed_long_ago, LONG).await;
    assert_eq!(
        complete(store, &completed_long_ago, &token, LONG).await,
        Completion::Recorded
    );
    store.backdate(&completed_long_ago).await;
    let live = unique_event_id("live");
    acquire(store, &live, LONG).await;
    let live_old = unique_event_id("liveold");
    acquire(store, &live_old, LONG).await;
    store.backdate(&live_old).await;
    let foreign_recent = unique_event_id("foreignnew");
    store.insert_seed_row(&foreign_recent, false).await;

    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store.purge(Duration::from_secs(72 * 3600)).await.unwrap(),
        3
    );
    assert_eq!(
        store.event_ids().await,
        BTreeSet::from([
            completed,
            completed_long_ago,
            live,
            live_old,
            foreign_recent.clone()
        ])
    );
    assert_eq!(
        store.purge(Duration::from_secs(72 * 3600)).await.unwrap(),
        0
    );
    // A row written by another tool (no state of its own) counts as completed.
    assert_eq!(
        claim(store, &foreign_recent, LONG).await.unwrap(),
        Claim::Completed
    );
}

/// `spawn_purge` empties the table of expired completions, and stops promptly.
pub async fn purge_task_purges_until_stopped<S: TestDatabase>(store: &S) {
    let done = unique_event_id("done");
    let token = acquire(store, &done, LONG).await;
    assert_eq!(
        complete(store, &done, &token, Duration::from_millis(10)).await,
        Completion::Recorded
    );
    tokio::time::sleep(Duration::from_millis(20)).await;

    let task = store.spawn_purge(LONG, Duration::from_millis(50));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !store.event_ids().await.is_empty() {
        assert!(Instant::now() < deadline, "the task never purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(Duration::from_secs(5), task.stop())
        .await
        .expect("stop returns promptly");
}

/// A purge task whose purge waits for the lock that `block` takes (and holds until the
/// answered guard is dropped) still stops within half a second.
pub async fn purge_task_stops_promptly_while_its_purge_waits_for_a_lock<S, G, F>(
    store: &S,
    block: impl FnOnce() -> F,
) where
    S: TestDatabase,
    F: Future<Output = G>,
{
    // Something to purge, so that the purge writes.
    let id = unique_event_id("blocked");
    let token = acquire(store, &id, LONG).await;
    assert_eq!(
        complete(store, &id, &token, Duration::from_millis(1)).await,
        Completion::Recorded
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let guard = block().await;
    let task = store.spawn_purge(LONG, Duration::from_millis(10));
    // Let the purge start and wait for the lock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(10), task.stop()).await;
    let took = started.elapsed();
    drop(guard);
    stopped.expect("stop returns");
    assert!(took < Duration::from_millis(500), "stop took {took:?}");
}

/// A claim on a store whose database cannot be reached fails within its acquire timeout (well
/// under 3 seconds); answers the error.
pub async fn claim_fails_within_the_acquire_timeout(store: &impl IdempotencyStore) -> StoreError {
    let started = Instant::now();
    let error = claim(store, "evt_down", LONG).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    error
}

/// A delivery through a layer over a store whose database cannot be reached is answered 503
/// (within 3 seconds), and the handler is not called.
pub async fn unavailable_store_gets_503_without_calling_the_handler(store: impl IdempotencyStore) {
    let handler = CountingHandler::new();
    let service = tower::Layer::layer(&layer(store), handler.clone());
    let delivery = Delivery::event("evt_down", TYPE).signed(&secret(), fixtures::NOW);
    let started = Instant::now();
    let status = send(&service, delivery.into_request()).await.status;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(handler.calls(), 0);
}

/// A count from the environment variable `name`, or `default`.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// [`SANGHO_TRIALS`](env_count) trials (default 50) of 200 concurrent deliveries of one event,
/// alternating between two app instances (each its own layer and pool) sharing one database:
/// the handler runs exactly once every time, and every delivery is answered 200 or 409.
pub async fn two_instances_run_the_handler_once_per_event<S>(instances: [S; 2])
where
    S: IdempotencyStore + Clone,
{
    const DELIVERIES: usize = 200;
    let trials = env_count("SANGHO_TRIALS", 50);
    let handler = CountingHandler::new().with_delay(Duration::from_millis(20));
    let services = instances.map(|store| tower::Layer::layer(&layer(store), handler.clone()));
    let started = Instant::now();
    for trial in 0..trials {
        let clocks = Clocks::now();
        let before = handler.calls();
        let id = unique_event_id("trial");
        let delivery = Delivery::event(&id, TYPE).signed(&secret(), fixtures::NOW);
        let barrier = Arc::new(tokio::sync::Barrier::new(DELIVERIES));
        let mut tasks = tokio::task::JoinSet::new();
        for attempt in 0..DELIVERIES {
            let service = services[attempt % 2].clone();
            let (request, barrier) = (delivery.clone().into_request(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                send(&service, request).await.status
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let status = joined.expect("a delivery task");
            assert!(
                matches!(status, StatusCode::OK | StatusCode::CONFLICT),
                "trial {trial}: a delivery got {status}"
            );
        }
        assert_eq!(
            handler.calls() - before,
            1,
            "trial {trial}: the handler ran once{}",
            clocks.stepped()
        );
    }
    eprintln!(
        "{trials} trials of {DELIVERIES} concurrent deliveries over two instances: 0 doubles, 0 losses, {:?}",
        started.elapsed()
    );
}

/// The wall clock and the monotonic clock read together, to tell a failure caused by a step
/// of the machine's wall clock (which the database's leases are judged on: a forward step past
/// the lease expires live claims at once, RELIABILITY.md, "the wall clocks") from one of the
/// store.
struct Clocks {
    wall: std::time::SystemTime,
    monotonic: Instant,
}

impl Clocks {
    fn now() -> Self {
        Self {
            wall: std::time::SystemTime::now(),
            monotonic: Instant::now(),
        }
    }

    /// A note for a failure message: how far the wall clock stepped since [`Clocks::now`]
    /// (more than 100 ms away from the monotonic clock), or nothing.
    fn stepped(&self) -> String {
        let monotonic = self.monotonic.elapsed().as_secs_f64();
        let wall = match std::time::SystemTime::now().duration_since(self.wall) {
            Ok(forward) => forward.as_secs_f64(),
            Err(backward) => -backward.duration().as_secs_f64(),
        };
        match wall - monotonic {
            step if step.abs() > 0.1 => format!(
                " (the wall clock stepped {step:+.3} s during the trial: a forward step past \
                 the lease expires live claims)"
            ),
            _ => String::new(),
        }
    }
}

/// A purge of a backlog of [`SANGHO_PURGE_ROWS`](env_count) expired rows (default 100 000)
/// beside 32 concurrent claimers of fresh events: no claim fails, none is doubled, and the
/// whole backlog is deleted. Prints the claims' latency percentiles.
pub async fn purge_of_a_backlog_beside_32_claimers_fails_no_claim<S>(store: &S)
where
    S: TestDatabase + Clone,
{
    const CLAIMERS: usize = 32;
    let rows = env_count("SANGHO_PURGE_ROWS", 100_000);
    let loaded = Instant::now();
    store.insert_expired_rows(rows).await;
    eprintln!("{rows} expired rows inserted in {:?}", loaded.elapsed());

    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut claimers = tokio::task::JoinSet::new();
    for _ in 0..CLAIMERS {
        let (store, done) = (store.clone(), done.clone());
        claimers.spawn(async move {
            let mut latencies = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let id = unique_event_id("beside");
                let started = Instant::now();
                let token = acquire(&store, &id, LONG).await;
                latencies.push(started.elapsed());
                assert_eq!(
                    complete(&store, &id, &token, LONG).await,
                    Completion::Recorded,
                    "{id} completes"
                );
                assert_eq!(
                    claim(&store, &id, LONG).await.expect("no claim fails"),
                    Claim::Completed,
                    "{id} is not doubled"
                );
            }
            latencies
        });
    }
    // The claimers are running.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let purging = Instant::now();
    let deleted = store.purge(LONG).await.expect("the purge");
    let purge_took = purging.elapsed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut latencies = Vec::new();
    while let Some(joined) = claimers.join_next().await {
        latencies.extend(joined.expect("a claimer"));
    }
    assert_eq!(deleted, rows, "the whole backlog is deleted");
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    eprintln!(
        "purge of {rows} rows beside {CLAIMERS} claimers: purge {purge_took:?}; {} claims, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(0.5),
        at(0.99),
        latencies[latencies.len() - 1]
    );
}

/// A handler that runs three and a half times the one-second lease, with redeliveries every
/// 300 ms meanwhile: they get 409 (the layer renews the claim), the handler runs once, its
/// 2xx completes the event, and a redelivery afterwards is a duplicate.
pub async fn a_handler_longer_than_the_lease_runs_once(store: impl IdempotencyStore) {
    let handler = CountingHandler::new().with_delay(Duration::from_millis(3_500));
    let service = tower::Layer::layer(
        &builder(store)
            .with_lease(Duration::from_secs(1))
            .build()
            .expect("valid settings"),
        handler.clone(),
    );
    let id = unique_event_id("slow");
    let delivery = Delivery::event(&id, TYPE).signed(&secret(), fixtures::NOW);
    let first = tokio::spawn({
        let (service, request) = (service.clone(), delivery.clone().into_request());
        async move { send(&service, request).await.status }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    while !first.is_finished() {
        let status = send(&service, delivery.clone().into_request()).await.status;
        assert!(
            matches!(status, StatusCode::CONFLICT | StatusCode::OK),
            "a redelivery during the handler got {status}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(first.await.unwrap(), StatusCode::OK);
    assert_eq!(handler.calls(), 1, "the slow handler ran once");
    assert_eq!(
        send(&service, delivery.into_request()).await.status,
        StatusCode::OK
    );
    assert_eq!(handler.calls(), 1, "and its 2xx completed the event");
}

/// How long the lock tests hold their lock: past the layer's store timeout of those tests
/// ([`LOCK_TEST_STORE_TIMEOUT`]) and past the store's lock timeout (2 s by default).
pub const LOCK_HELD: Duration = Duration::from_millis(2_600);

/// The layer's store timeout in the lock tests.
pub const LOCK_TEST_STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Another transaction's lock that a store statement waits for (a row lock, SQLite's write
/// lock), as a pair: the closure that takes it, and the one that ends it with what the first
/// answered.
pub trait OtherLock {
    /// Takes the lock, runs `during` while it is held, and ends it [`LOCK_HELD`] after it was
    /// taken (whether `during` answered before or not): what `during` answered, and how long
    /// after the lock was taken.
    fn hold_while<T>(self, during: impl Future<Output = T>) -> impl Future<Output = (T, Duration)>;
}

impl<L, F, G, U, R> OtherLock for (L, U)
where
    L: FnOnce() -> F,
    F: Future<Output = G>,
    U: FnOnce(G) -> R,
    R: Future<Output = ()>,
{
    async fn hold_while<T>(self, during: impl Future<Output = T>) -> (T, Duration) {
        let (lock, unlock) = self;
        let guard = lock().await;
        let locked = Instant::now();
        let (answer, ()) = tokio::join!(
            async {
                let answer = during.await;
                (answer, locked.elapsed())
            },
            async {
                tokio::time::sleep(LOCK_HELD).await;
                unlock(guard).await;
            },
        );
        answer
    }
}

/// A delivery of `id` whose claim waits on a lock that another transaction holds (`lock`, on a
/// row of the event: a claim left expired by a crashed process) for [`LOCK_HELD`], past the
/// layer's store timeout of 1 s: 503, the handler not called. Once the lock is released, and
/// after a short wait, the next delivery is processed (200, the handler called once), not 409:
/// the waiting claim gave up on the database instead of landing after its 503 (and after the
/// layer's release of it) as an in-flight claim nobody owns.
///
/// `store` has one connection, which the waiting claim holds: the layer's release of the
/// timed-out claim waits for it (as it may in a pool busy under load), and cannot delete the
/// claim once it lands. Only the claim's own bound on its lock wait keeps the event free.
pub async fn a_claim_that_waits_on_a_lock_never_lands_after_its_503(
    store: impl IdempotencyStore,
    id: &str,
    lock: impl OtherLock,
) {
    // An expired claim of the event: the row the other transaction locks.
    acquire(&store, id, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let handler = CountingHandler::new();
    let service = tower::Layer::layer(
        &builder(store)
            .with_store_timeout(LOCK_TEST_STORE_TIMEOUT)
            .build()
            .expect("valid settings"),
        handler.clone(),
    );
    let delivery = Delivery::event(id, TYPE).signed(&secret(), fixtures::NOW);

    let (first, waited) = lock
        .hold_while(send(&service, delivery.clone().into_request()))
        .await;
    assert_eq!(
        first.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a claim waiting on the lock"
    );
    assert!(
        waited < LOCK_HELD - Duration::from_millis(500),
        "the layer answered within its store timeout, not when the lock was released \
         (after {waited:?})"
    );
    assert_eq!(handler.calls(), 0);
    // Time for a claim still waiting on the lock to land.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let next = send(&service, delivery.clone().into_request()).await;
    assert_eq!(
        next.status,
        StatusCode::OK,
        "the next delivery after the lock was released (409: the claim that waited on the lock \
         landed after its 503, and holds the event for a lease)"
    );
    assert_eq!(handler.calls(), 1, "processed once");
    let again = send(&service, delivery.into_request()).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(handler.calls(), 1, "then a duplicate");
}

/// A renewal of a live claim whose row another transaction holds (`lock`) for [`LOCK_HELD`]:
/// it fails after the store's lock timeout (2 s), before the lock is released, instead of
/// waiting for it and landing whenever it is released (after its owner may have released the
/// claim, re-creating it). Once the row is released, the claim is as it was.
pub async fn a_renewal_that_waits_on_a_lock_gives_up_after_the_lock_timeout(
    store: impl IdempotencyStore,
    id: &str,
    lock: impl OtherLock,
) {
    let token = acquire(&store, id, LONG).await;
    let renewed = store.renew(Claimant::new(id, TYPE, &token), LONG);
    let (renewed, waited) = lock.hold_while(renewed).await;
    assert!(
        matches!(renewed, Err(StoreError::Backend(_))),
        "the renewal fails on the lock timeout, it does not wait for the lock: {renewed:?} \
         after {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(1_900) && waited < LOCK_HELD,
        "it waited {waited:?}: about the lock timeout (2 s), less than the lock was held"
    );
    let renewed = store.renew(Claimant::new(id, TYPE, &token), LONG).await;
    assert_eq!(renewed.expect("renew"), Renewal::Held);
    assert_eq!(
        complete(&store, id, &token, LONG).await,
        Completion::Recorded
    );
}

/// 21 scrapes of `inbox`'s gauges beside `rows` completed events and `received` waiting ones:
/// each counts the waiting events, and their median takes under 10 ms (printed, with the
/// slowest).
pub async fn a_scrape_of_the_gauges_takes_under_10_ms(
    inbox: &impl sangho_webhook::inbox::Inbox,
    rows: u64,
    received: u64,
) {
    let mut scrapes = Vec::new();
    for _ in 0..21 {
        let started = Instant::now();
        let gauges = inbox.gauges().await.unwrap();
        scrapes.push(started.elapsed());
        assert_eq!(gauges.received, received, "{gauges:?}");
    }
    scrapes.sort();
    let median = scrapes[10];
    eprintln!(
        "the gauges beside {rows} completed events: median {median:?}, max {:?}",
        scrapes[20]
    );
    assert!(
        median < Duration::from_millis(10),
        "a scrape takes {median:?}"
    );
}
