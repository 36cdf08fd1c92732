//! The inbox migration on a busy table: a table of the previous release with
//! `SANGHO_MIGRATION_ROWS` completed events in it (default 1 000 000, all still within their
//! retention), an instance of the previous release claiming and completing new events on it
//! with its own statements (`fixtures/previous/<dialect>_{claim,complete}.sql`), as in a
//! rolling deploy, and the current store's `migrate()` upgrading it meanwhile. Proves, on
//! PostgreSQL and on MariaDB, that the upgrade does not rewrite the table (PostgreSQL: its
//! `pg_relation_filenode` is the same; MariaDB: its InnoDB tablespace and table id are the
//! same, which a copy or an in-place rebuild would change), that no claim or completion of the
//! load failed or waited a second or more while it ran, that inbox receipts and the direct
//! mode work on the table afterwards, and that a second `migrate()` changes nothing. Prints
//! the migration's time and the load's latencies during it (maximum, p99).
//!
//! The second test of each backend runs the same while one of the previous release's handler
//! transactions (a completion with `complete_in`) holds the table for 3 s as the migration
//! starts: the migration's wait for the table's exclusive lock queues the claims behind it, so
//! it must give up soon and try again, instead of waiting the transaction out (MariaDB's
//! default `lock_wait_timeout` is a day: the claims queued behind it failed after their own 2 s)
//! or failing (PostgreSQL's former single try under a 2 s `lock_timeout`: `migrate()` failed
//! with SQLSTATE 55P03).
//!
//! Ignored by default (it needs the servers; about 10 to 15 s per test with 1 000 000 rows):
//! run with `cargo test -p sangho-webhook-sqlx --all-features --test inbox_migration_load --
//! --include-ignored --test-threads 1 --nocapture`, against `SANGHO_TEST_POSTGRES_URL` and
//! `SANGHO_TEST_MYSQL_URL` (defaults `postgres://postgres@127.0.0.1:5432/test`,
//! `mysql://root@127.0.0.1:3306/test`).

mod common;

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use sangho_webhook::{
    inbox::{Inbox, Receipt, ReceivedEvent},
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore},
    testing::conformance::unique_event_id,
};
use sangho_webhook_sqlx::{SqlStore, dialect::Dialect};

use common::{LONG, TYPE};

/// How many tasks of the previous release claim and complete events at once.
const LOAD_TASKS: usize = 8;

/// The load before and after the migration, so that it runs at full pace throughout.
const WARM_UP: Duration = Duration::from_millis(500);

/// The bound on every claim and completion that overlapped the migration: the requirement
/// (no lock that blocks claims for a second or more), with no margin of its own; the
/// latencies it bounds are a few milliseconds when nothing blocks them.
const BOUND: Duration = Duration::from_secs(1);

/// The previous release's lock timeout, lease and retention, as its store used them.
const PREVIOUS_LOCK_TIMEOUT_S: u64 = 2;
const LEASE_US: i64 = 60_000_000;
const RETENTION_US: i64 = 72 * 3_600_000_000;

/// How long the long transaction of the second test of each backend holds the table: longer
/// than a claim's lock timeout, so that a migration that queued the claims behind its wait
/// for it would fail them.
const HELD: Duration = Duration::from_secs(3);

/// The backend, and the long transaction if there is one, for the figures.
fn label(backend: &str, held: Option<Duration>) -> String {
    match held {
        Some(held) => format!("{backend}, a transaction holding the table for {held:?}"),
        None => backend.to_owned(),
    }
}

/// The table's rows: `SANGHO_MIGRATION_ROWS`, or 1 000 000.
fn rows() -> u64 {
    std::env::var("SANGHO_MIGRATION_ROWS").map_or(1_000_000, |rows| {
        rows.parse().expect("SANGHO_MIGRATION_ROWS is a number")
    })
}

/// The previous release's `fixture` for `table`: its index names and its table name replaced
/// as the store names them for a table other than the default one.
fn for_table(fixture: &str, table: &str) -> String {
    fixture
        .replace(
            "idx_webhook_processed_at",
            &format!("{table}_processed_at_idx"),
        )
        .replace("idx_webhook_expires_at", &format!("{table}_expires_at_idx"))
        .replace("processed_webhook_events", table)
        .replace("{table}", table)
}

/// A claim or a completion of the load: when it started and ended, and its error if it
/// failed (or answered anything but a new event acquired, or completed by its token).
struct Operation {
    claim: bool,
    started: Instant,
    ended: Instant,
    error: Option<String>,
}

/// Serves the previous release's traffic: [`LOAD_TASKS`] tasks, each claiming a new event and
/// completing it through `operation` (`true` for a claim) in a loop until `stop`; answers
/// every operation.
fn serve_previous_release<F, Fut>(
    stop: &Arc<AtomicBool>,
    operation: F,
) -> Vec<tokio::task::JoinHandle<Vec<Operation>>>
where
    F: Fn(bool, String, String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    (0..LOAD_TASKS)
        .map(|_| {
            let (stop, operation) = (stop.clone(), operation.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let id = unique_event_id("load");
                    let token = ClaimToken::generate().as_str().to_owned();
                    for claim in [true, false] {
                        let started = Instant::now();
                        let error = operation(claim, id.clone(), token.clone()).await.err();
                        done.push(Operation {
                            claim,
                            started,
                            ended: Instant::now(),
                            error,
                        });
                    }
                }
                done
            })
        })
        .collect()
}

/// What the load and the migration measured.
struct Measured {
    migration: Duration,
    operations: Vec<Operation>,
    window: (Instant, Instant),
}

/// Runs the load, `migrate` meanwhile after [`WARM_UP`], and the load for [`WARM_UP`] more.
async fn migrate_under_load<F, Fut, M>(operation: F, migrate: M) -> Measured
where
    F: Fn(bool, String, String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
    M: Future<Output = ()>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let load = serve_previous_release(&stop, operation);
    tokio::time::sleep(WARM_UP).await;
    let started = Instant::now();
    migrate.await;
    let ended = Instant::now();
    tokio::time::sleep(WARM_UP).await;
    stop.store(true, Ordering::Relaxed);
    let mut operations = Vec::new();
    for task in load {
        operations.extend(task.await.expect("a load task"));
    }
    Measured {
        migration: ended - started,
        operations,
        window: (started, ended),
    }
}

/// The maximum and the 99th percentile of `latencies`, sorted in place.
fn max_and_p99(latencies: &mut [Duration]) -> (Duration, Duration) {
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    (*latencies.last().expect("a latency"), p99)
}

/// Prints the figures of `measured` and asserts that every operation succeeded and that none
/// overlapping the migration took [`BOUND`] or longer.
fn check_the_load(backend: &str, rows: u64, measured: &Measured) {
    let failed: Vec<&String> = measured
        .operations
        .iter()
        .filter_map(|operation| operation.error.as_ref())
        .collect();
    let (from, to) = measured.window;
    let during = |claim: bool| -> Vec<Duration> {
        measured
            .operations
            .iter()
            .filter(|operation| operation.claim == claim)
            .filter(|operation| operation.started < to && operation.ended > from)
            .map(|operation| operation.ended - operation.started)
            .collect()
    };
    let (mut claims, mut completions) = (during(true), during(false));
    assert!(!claims.is_empty(), "no claim ran during the migration");
    let (claim_max, claim_p99) = max_and_p99(&mut claims);
    let (complete_max, complete_p99) = max_and_p99(&mut completions);
    eprintln!(
        "{backend}, {rows} rows: migrate() took {:?}; {} operations of the previous release in \
         all, {} claims during the migration: max {claim_max:?}, p99 {claim_p99:?}; {} \
         completions: max {complete_max:?}, p99 {complete_p99:?}",
        measured.migration,
        measured.operations.len(),
        claims.len(),
        completions.len(),
    );
    assert!(
        failed.is_empty(),
        "{} of {} operations of the previous release failed, the first: {}",
        failed.len(),
        measured.operations.len(),
        failed[0]
    );
    assert!(
        claim_max < BOUND && complete_max < BOUND,
        "a claim waited {claim_max:?}, a completion {complete_max:?} during the migration"
    );
}

/// What the upgraded table does for both modes: an old completed event is still a duplicate,
/// a new event is acquired and completed by the direct mode, an inbox receipt is stored and
/// taken and completed.
async fn check_both_modes<DB>(store: &SqlStore<DB>, old: &str)
where
    DB: Dialect,
{
    let claim = |id: String| async move {
        let token = ClaimToken::generate();
        let claimed = store
            .claim(Claimant::new(&id, TYPE, &token), LONG)
            .await
            .expect("claim");
        (claimed, token, id)
    };
    let (claimed, _, _) = claim(old.to_owned()).await;
    assert_eq!(
        claimed,
        Claim::Completed,
        "an old event is still a duplicate"
    );
    let (claimed, token, id) = claim(unique_event_id("direct")).await;
    assert_eq!(claimed, Claim::Acquired);
    assert_eq!(
        IdempotencyStore::complete(store, Claimant::new(&id, TYPE, &token), LONG)
            .await
            .expect("complete"),
        Completion::Recorded
    );
    let received = unique_event_id("inbox");
    let body = Bytes::from(format!(r#"{{"id":"{received}"}}"#));
    let headers = [("content-type".to_owned(), "application/json".to_owned())];
    let event = ReceivedEvent::new(&received, TYPE, &body, &headers, "/webhooks");
    assert_eq!(store.receive(&event).await.unwrap(), Receipt::Stored);
    let taken = store
        .take(&ClaimToken::generate(), LONG, Default::default())
        .await
        .unwrap()
        .expect("the receipt is due");
    assert_eq!(taken.event_id, received);
    assert_eq!(
        Inbox::complete(store, &taken.claimant(), LONG)
            .await
            .unwrap(),
        Completion::Recorded
    );
}

/// `migrate()` of `store`, timed: the table is up to date when it answers.
async fn timed_migrate<DB>(store: &SqlStore<DB>) -> Duration
where
    DB: Dialect,
{
    let started = Instant::now();
    store.migrate().await.expect("migrate");
    started.elapsed()
}

mod postgres {
    use sangho_webhook_sqlx::{
        PostgresStore,
        sqlx::{self, AssertSqlSafe, PgPool},
    };

    use super::*;

    /// The previous release's schema, claim and completion.
    const SCHEMA: &str = include_str!("fixtures/previous/postgres.sql");
    const CLAIM: &str = include_str!("fixtures/previous/postgres_claim.sql");
    const COMPLETE: &str = include_str!("fixtures/previous/postgres_complete.sql");

    async fn run(pool: &PgPool, sql: String) {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(pool)
            .await
            .expect("a statement");
    }

    /// The table's file: another one after a rewrite.
    async fn filenode(pool: &PgPool, table: &str) -> i64 {
        sqlx::query_scalar("SELECT pg_relation_filenode($1::regclass)::bigint")
            .bind(table)
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// A claim (`claim`) or a completion of `id` by `token`, as the previous release ran it.
    async fn operation(
        pool: PgPool,
        sql: (Arc<str>, Arc<str>),
        claim: bool,
        id: String,
        token: String,
    ) -> Result<(), String> {
        let (claim_sql, complete_sql) = sql;
        if claim {
            let status: Option<String> = sqlx::query_scalar(AssertSqlSafe(claim_sql.to_string()))
                .bind(&id)
                .bind(TYPE)
                .bind(&token)
                .bind(LEASE_US)
                .fetch_optional(&pool)
                .await
                .map_err(|error| format!("claim {id}: {error}"))?;
            match status.as_deref() {
                Some("acquired") => Ok(()),
                other => Err(format!("claim {id}: {other:?}")),
            }
        } else {
            let owner: Option<String> = sqlx::query_scalar(AssertSqlSafe(complete_sql.to_string()))
                .bind(&id)
                .bind(TYPE)
                .bind(&token)
                .bind(RETENTION_US)
                .fetch_optional(&pool)
                .await
                .map_err(|error| format!("complete {id}: {error}"))?;
            match owner {
                Some(owner) if owner == token => Ok(()),
                other => Err(format!("complete {id}: {other:?}")),
            }
        }
    }

    /// Opens a transaction that claims a new event and completes it as the previous release's
    /// `complete_in` does in a handler's transaction, and commits it after `held`: the
    /// transaction's lock on the table stays held until then.
    async fn hold_the_table(
        pool: &PgPool,
        sql: &(Arc<str>, Arc<str>),
        held: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let (id, token) = (unique_event_id("held"), ClaimToken::generate());
        let token = token.as_str().to_owned();
        operation(pool.clone(), sql.clone(), true, id.clone(), token.clone())
            .await
            .expect("claim the held event");
        let mut transaction = pool.begin().await.unwrap();
        sqlx::query(AssertSqlSafe(sql.1.to_string()))
            .bind(&id)
            .bind(TYPE)
            .bind(&token)
            .bind(RETENTION_US)
            .execute(&mut *transaction)
            .await
            .expect("complete in the handler's transaction");
        tokio::spawn(async move {
            tokio::time::sleep(held).await;
            transaction.commit().await.unwrap();
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn the_upgrade_of_a_busy_table_neither_rewrites_it_nor_blocks_its_claims() {
        busy_table(None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn the_upgrade_waits_for_a_long_transaction_without_blocking_the_claims() {
        busy_table(Some(HELD)).await;
    }

    /// The upgrade of a busy table, under the load of the previous release and, with `held`,
    /// while one of its handlers' transactions holds the table for that long.
    async fn busy_table(held: Option<Duration>) {
        let rows = rows();
        let table = common::unique_table("migload");
        let _drop = DropTable(table.clone());
        let store: PostgresStore = common::postgres_store_on(&table, 4).await;
        let pool = store.pool().clone();
        run(&pool, for_table(SCHEMA, &table)).await;
        let filled = Instant::now();
        run(
            &pool,
            format!(
                "INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, \
                 expires_at) \
                 SELECT 'evt_old_' || n, '{TYPE}', now(), 'completed', md5(n::text), \
                        now() + INTERVAL '72 hours' \
                 FROM generate_series(1, {rows}) AS n"
            ),
        )
        .await;
        // As autovacuum keeps a busy table (and so that it does not start on it meanwhile).
        run(&pool, format!("VACUUM ANALYZE {table}")).await;
        eprintln!("postgres: {rows} rows written in {:?}", filled.elapsed());
        let before = filenode(&pool, &table).await;

        let load = common::postgres_store_on(&table, LOAD_TASKS as u32)
            .await
            .pool()
            .clone();
        let timeout = PREVIOUS_LOCK_TIMEOUT_S * 1000;
        let sql: (Arc<str>, Arc<str>) = (
            for_table(CLAIM, &table)
                .replace("{asynchronous_commit}", "false")
                .replace("{lock_timeout_ms}", &timeout.to_string())
                .into(),
            for_table(COMPLETE, &table).into(),
        );
        let holder = load.clone();
        let measured = migrate_under_load(
            {
                let sql = sql.clone();
                move |claim, id, token| operation(load.clone(), sql.clone(), claim, id, token)
            },
            async {
                let held = match held {
                    Some(held) => Some(hold_the_table(&holder, &sql, held).await),
                    None => None,
                };
                timed_migrate(&store).await;
                if let Some(held) = held {
                    held.await.unwrap();
                }
            },
        )
        .await;

        check_the_load(&label("postgres", held), rows, &measured);
        assert_eq!(
            filenode(&pool, &table).await,
            before,
            "the table was rewritten"
        );
        check_both_modes(&store, "evt_old_1").await;
        let again = timed_migrate(&store).await;
        eprintln!("postgres: migrate() again, up to date: {again:?}");
        assert_eq!(filenode(&pool, &table).await, before);
    }

    struct DropTable(String);

    impl Drop for DropTable {
        fn drop(&mut self) {
            common::drop_table(self.0.clone());
        }
    }
}

#[cfg(feature = "mariadb")]
mod mariadb {
    use sangho_webhook_sqlx::{
        MariaDbStore,
        sqlx::{self, AssertSqlSafe, MySqlPool},
    };

    use super::*;

    /// The previous release's schema, claim and completion.
    const SCHEMA: &str = include_str!("fixtures/mariadb_previous_release.sql");
    const CLAIM: &str = include_str!("fixtures/previous/mariadb_claim.sql");
    const COMPLETE: &str = include_str!("fixtures/previous/mariadb_complete.sql");

    async fn run(pool: &MySqlPool, sql: String) {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(pool)
            .await
            .expect("a statement");
    }

    /// The table's InnoDB tablespace and table id: others after a copy or an in-place rebuild.
    async fn tablespace(pool: &MySqlPool, table: &str) -> (i64, i64) {
        sqlx::query_as(
            "SELECT CAST(space AS SIGNED), CAST(table_id AS SIGNED) \
             FROM information_schema.innodb_sys_tables WHERE name = CONCAT(DATABASE(), '/', ?)",
        )
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap()
    }

    /// A claim (`claim`) or a completion of `id` by `token`, as the previous release ran it.
    async fn operation(
        pool: MySqlPool,
        sql: (Arc<str>, Arc<str>),
        claim: bool,
        id: String,
        token: String,
    ) -> Result<(), String> {
        let (claim_sql, complete_sql) = sql;
        if claim {
            let status: String = sqlx::query_scalar(AssertSqlSafe(claim_sql.to_string()))
                .bind(&id)
                .bind(TYPE)
                .bind(&token)
                .bind(LEASE_US)
                .bind(LEASE_US)
                .bind(&token)
                .fetch_one(&pool)
                .await
                .map_err(|error| format!("claim {id}: {error}"))?;
            match status.as_str() {
                "acquired" => Ok(()),
                other => Err(format!("claim {id}: {other}")),
            }
        } else {
            let owner: String = sqlx::query_scalar(AssertSqlSafe(complete_sql.to_string()))
                .bind(&id)
                .bind(TYPE)
                .bind(&token)
                .bind(RETENTION_US)
                .fetch_one(&pool)
                .await
                .map_err(|error| format!("complete {id}: {error}"))?;
            match owner == token {
                true => Ok(()),
                false => Err(format!("complete {id}: completed by {owner}")),
            }
        }
    }

    /// Opens a transaction that claims a new event and completes it as the previous release's
    /// `complete_in` does in a handler's transaction, and commits it after `held`: the
    /// transaction's metadata lock on the table stays held until then.
    async fn hold_the_table(
        pool: &MySqlPool,
        sql: &(Arc<str>, Arc<str>),
        held: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let (id, token) = (unique_event_id("held"), ClaimToken::generate());
        let token = token.as_str().to_owned();
        operation(pool.clone(), sql.clone(), true, id.clone(), token.clone())
            .await
            .expect("claim the held event");
        let mut transaction = pool.begin().await.unwrap();
        sqlx::query(AssertSqlSafe(sql.1.to_string()))
            .bind(&id)
            .bind(TYPE)
            .bind(&token)
            .bind(RETENTION_US)
            .execute(&mut *transaction)
            .await
            .expect("complete in the handler's transaction");
        tokio::spawn(async move {
            tokio::time::sleep(held).await;
            transaction.commit().await.unwrap();
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn the_upgrade_of_a_busy_table_neither_rebuilds_it_nor_blocks_its_claims() {
        busy_table(None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn the_upgrade_waits_for_a_long_transaction_without_blocking_the_claims() {
        busy_table(Some(HELD)).await;
    }

    /// The upgrade of a busy table, under the load of the previous release and, with `held`,
    /// while one of its handlers' transactions holds the table for that long.
    async fn busy_table(held: Option<Duration>) {
        let rows = rows();
        let table = common::unique_table("migload");
        let _drop = common::MariaDbTableGuard(table.clone());
        let store: MariaDbStore = common::mariadb_store_on(&table, 4).await;
        let pool = store.pool().clone();
        run(&pool, for_table(SCHEMA, &table)).await;
        let filled = Instant::now();
        run(
            &pool,
            format!(
                "INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, \
                 expires_at) \
                 SELECT CONCAT('evt_old_', seq), '{TYPE}', UTC_TIMESTAMP(6), 'completed', \
                        MD5(seq), UTC_TIMESTAMP(6) + INTERVAL 72 HOUR \
                 FROM seq_1_to_{rows}"
            ),
        )
        .await;
        eprintln!("mariadb: {rows} rows written in {:?}", filled.elapsed());
        let before = tablespace(&pool, &table).await;

        let load = common::mariadb_store_on(&table, LOAD_TASKS as u32)
            .await
            .pool()
            .clone();
        let sql: (Arc<str>, Arc<str>) = (
            for_table(CLAIM, &table)
                .replace("{lock_timeout_s}", &PREVIOUS_LOCK_TIMEOUT_S.to_string())
                .into(),
            for_table(COMPLETE, &table).into(),
        );
        let holder = load.clone();
        let measured = migrate_under_load(
            {
                let sql = sql.clone();
                move |claim, id, token| operation(load.clone(), sql.clone(), claim, id, token)
            },
            async {
                let held = match held {
                    Some(held) => Some(hold_the_table(&holder, &sql, held).await),
                    None => None,
                };
                timed_migrate(&store).await;
                if let Some(held) = held {
                    held.await.unwrap();
                }
            },
        )
        .await;

        check_the_load(&label("mariadb", held), rows, &measured);
        assert_eq!(
            tablespace(&pool, &table).await,
            before,
            "the table was rebuilt"
        );
        check_both_modes(&store, "evt_old_1").await;
        let again = timed_migrate(&store).await;
        eprintln!("mariadb: migrate() again, up to date: {again:?}");
        assert_eq!(tablespace(&pool, &table).await, before);
    }
}
