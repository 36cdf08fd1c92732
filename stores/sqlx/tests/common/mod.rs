//! Shared pieces of the store tests: database URLs, a unique table per test, stores that drop
//! their table (or delete their file) when the test ends, a way to send one delivery, and
//! ([`bodies`]) the tests every dialect runs.

#![allow(dead_code)]

pub mod bodies;
#[path = "../../../../tests/common/logs.rs"]
pub mod logs;
pub mod private_mariadb;
pub mod private_postgres;
pub mod transactional;
pub mod turns;

use std::{collections::BTreeSet, ops::Deref, time::Duration};

use async_trait::async_trait;
use bodies::TestDatabase;
use sangho_webhook::{
    SanghoWebhookLayer,
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, StoreError},
    testing::{conformance::StoreUnderTest, fixtures},
};
#[cfg(feature = "mariadb")]
use sangho_webhook_sqlx::MariaDbStore;
use sangho_webhook_sqlx::{
    PostgresStore, PurgeTask, SqliteStore, TableName,
    sqlx::{
        self, AssertSqlSafe, Connection, Database, Executor, pool::PoolOptions,
        postgres::PgConnection,
    },
};

pub use sangho_webhook::testing::fixtures::{EVENT_TYPE as TYPE, secret};
pub const LONG: Duration = Duration::from_secs(3600);

/// The PostgreSQL server of the tests: `SANGHO_TEST_POSTGRES_URL`, or the local default.
pub fn postgres_url() -> String {
    std::env::var("SANGHO_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A table name no other test or run uses: `sangho_t_<label>_<16 hex digits>`.
pub fn unique_table(label: &str) -> String {
    format!("sangho_t_{label}_{:016x}", unique())
}

/// 64 bits that differ on every call, in every process: std's randomly keyed hasher over the
/// process id, a counter and the time.
pub fn unique() -> u64 {
    use std::{
        hash::{BuildHasher, RandomState},
        sync::atomic::{AtomicU64, Ordering},
        time::SystemTime,
    };
    static CALLS: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one((
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed),
        SystemTime::now(),
    ))
}

/// A loopback port nothing listens on right now (for a server of the test's own).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Whether the tests run as root (whom `initdb` refuses, and `mariadbd` unless told).
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

/// `request` addressed to the HTTP server at `server`.
pub fn to<B>(server: std::net::SocketAddr, request: http::Request<B>) -> http::Request<B> {
    let (mut parts, body) = request.into_parts();
    parts.uri = format!("http://{server}{}", parts.uri).parse().unwrap();
    http::Request::from_parts(parts, body)
}

/// SIGKILLs the app process `child` of a kill scenario and reaps it; on Unix, panics unless
/// the signal is what ended it, i.e. the process was still running when it was killed.
pub fn sigkill(child: &mut std::process::Child) {
    child.kill().expect("SIGKILL the app process");
    let status = child.wait().expect("reap the app process");
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the app process ended before SIGKILL: {status}"
    );
    #[cfg(not(unix))]
    let _ = status;
}

/// A store that owns a test table or file, and drops it with the last clone.
#[derive(Debug)]
pub struct TestStore<S> {
    pub store: S,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    /// Drop this PostgreSQL table.
    Table(String),
    /// Drop this MariaDB table.
    #[cfg(feature = "mariadb")]
    MariaDbTable(String),
    /// Delete this directory (the SQLite files).
    Dir(tempfile::TempDir),
}

impl<S> Deref for TestStore<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.store
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        match self {
            Cleanup::Table(table) => drop_table(table.clone()),
            #[cfg(feature = "mariadb")]
            Cleanup::MariaDbTable(table) => drop_mariadb_table(table.clone()),
            Cleanup::Dir(_) => {}
        }
    }
}

/// The MariaDB server of the tests: `SANGHO_TEST_MYSQL_URL`, or the local default.
#[cfg(feature = "mariadb")]
pub fn mariadb_url() -> String {
    std::env::var("SANGHO_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// Drops the MariaDB table it names when dropped.
#[cfg(feature = "mariadb")]
pub struct MariaDbTableGuard(pub String);

#[cfg(feature = "mariadb")]
impl Drop for MariaDbTableGuard {
    fn drop(&mut self) {
        drop_mariadb_table(std::mem::take(&mut self.0));
    }
}

/// Drops the MariaDB `table` and its receipt sequence (a table too, to MariaDB), as
/// [`drop_table`] does for PostgreSQL.
#[cfg(feature = "mariadb")]
pub fn drop_mariadb_table(table: String) {
    let tables = format!("{table}, {table}_sequence");
    drop_table_at::<sqlx::mysql::MySqlConnection>(mariadb_url(), tables);
}

/// Drops the PostgreSQL `table`.
pub fn drop_table(table: String) {
    drop_table_at::<PgConnection>(postgres_url(), table);
}

/// Drops `table` from a fresh connection to `url` on a thread of its own (this runs in `Drop`,
/// maybe inside a runtime, maybe while a test panics).
fn drop_table_at<C>(url: String, table: String)
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    let dropped = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the cleanup");
        runtime.block_on(async move {
            let mut connection = C::connect(&url).await?;
            sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
                .execute(&mut connection)
                .await?;
            connection.close().await
        })
    })
    .join();
    if !matches!(dropped, Ok(Ok(()))) {
        eprintln!("could not drop a test table: {dropped:?}");
    }
}

/// Writes `rows` completed events into the PostgreSQL `table` in one statement (no `ANALYZE`).
pub async fn postgres_completed_rows(pool: &sqlx::PgPool, table: &str, rows: u64) {
    let fill = format!(
        "INSERT INTO {table} (event_id, event_type, state, claim_token, expires_at, \
         received_at, sequence, body, due_at, attempts) \
         SELECT 'evt_done_' || n, 'invoice.paid', 'completed', repeat('0', 32), \
                now() + interval '72 hours', now() - interval '1 hour', \
                nextval('{table}_sequence'), '\\x7b7d', NULL, 1 \
         FROM generate_series(1, {rows}) AS n"
    );
    sqlx::raw_sql(AssertSqlSafe(fill))
        .execute(pool)
        .await
        .expect("write completed rows");
}

/// The scans of the PostgreSQL `table` (`pg_stat_user_tables.seq_scan`), once each of the
/// pool's `connections` has flushed its statistics.
async fn postgres_table_scans(pool: &sqlx::PgPool, connections: u32, table: &str) -> i64 {
    let mut all = Vec::new();
    for _ in 0..connections {
        let mut connection = pool.acquire().await.unwrap();
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(&mut *connection)
            .await
            .unwrap();
        all.push(connection);
    }
    sqlx::query_scalar("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = $1")
        .bind(table)
        .fetch_one(&mut *all[0])
        .await
        .unwrap()
}

/// The scans of the PostgreSQL `table` by 16 `round`s of the store's writes on it, once the
/// table grew: `warm` rounds on the new table first (the store's prepared statements settle
/// on their plans), then 20 000 completed rows written and 100 rounds. Autovacuum is off for
/// the table: no `ANALYZE` during the test, so that what the planner knows of the table is its
/// size alone. `connections` is the store pool's size.
pub async fn postgres_scans_once_grown<F, Round>(
    pool: &sqlx::PgPool,
    connections: u32,
    table: &str,
    warm: usize,
    mut round: F,
) -> i64
where
    F: FnMut() -> Round,
    Round: std::future::Future<Output = ()>,
{
    let no_analyze = format!("ALTER TABLE {table} SET (autovacuum_enabled = off)");
    sqlx::raw_sql(AssertSqlSafe(no_analyze))
        .execute(pool)
        .await
        .unwrap();
    for _ in 0..warm {
        round().await;
    }
    postgres_completed_rows(pool, table, 20_000).await;
    for _ in 0..100 {
        round().await;
    }
    let before = postgres_table_scans(pool, connections, table).await;
    for _ in 0..16 {
        round().await;
    }
    postgres_table_scans(pool, connections, table).await - before
}

/// The pool options of the tests: at most `connections`, a 10-second acquire timeout.
fn pool_options<DB: Database>(connections: u32) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(10))
}

/// `store` migrated, and cleaned up by `cleanup` with its last clone.
async fn migrated<S: TestDatabase>(store: S, cleanup: Cleanup) -> TestStore<S> {
    store.migrate().await.expect("migrate");
    TestStore { store, cleanup }
}

/// A migrated MariaDB store on a fresh table, over a pool of `connections`.
#[cfg(feature = "mariadb")]
pub async fn mariadb_store(label: &str, connections: u32) -> TestStore<MariaDbStore> {
    let table = unique_table(label);
    let store = mariadb_store_on(&table, connections).await;
    migrated(store, Cleanup::MariaDbTable(table)).await
}

/// A MariaDB store on `table` (not migrated), over a new pool of `connections`.
#[cfg(feature = "mariadb")]
pub async fn mariadb_store_on(table: &str, connections: u32) -> MariaDbStore {
    let pool = pool_options(connections)
        .connect(&mariadb_url())
        .await
        .expect("MariaDB is reachable (set SANGHO_TEST_MYSQL_URL)");
    let store = MariaDbStore::new(pool)
        .with_table_name(table)
        .expect("a valid table name");
    // The whole MariaDB suite again with its opt-in grouping of every write,
    // SANGHO_TEST_MARIADB_GROUP=1, or with none, SANGHO_TEST_MARIADB_GROUP=0.
    match std::env::var("SANGHO_TEST_MARIADB_GROUP").as_deref() {
        Ok("1") => store.with_group_commit(sangho_webhook_sqlx::GroupCommit::MARIADB),
        Ok("0") => store.with_group_commit(sangho_webhook_sqlx::GroupCommit::OFF),
        _ => store,
    }
}

impl<S: IdempotencyStore + Clone> TestStore<S> {
    /// The store for the conformance suite, which drops the table (or deletes the file) when
    /// the check ends.
    pub fn under_test(self) -> StoreUnderTest {
        StoreUnderTest::new(self.store.clone()).with_cleanup(self)
    }

    /// The store as an inbox for one inbox conformance check, its table dropped after it.
    pub fn inbox_under_test(self) -> sangho_webhook::testing::inbox_conformance::InboxUnderTest
    where
        S: sangho_webhook::inbox::Inbox,
    {
        sangho_webhook::testing::inbox_conformance::InboxUnderTest::new(self.store.clone())
            .with_cleanup(self)
    }
}

/// A migrated PostgreSQL store on a fresh table, over a pool of `connections`.
pub async fn postgres_store(label: &str, connections: u32) -> TestStore<PostgresStore> {
    let table = unique_table(label);
    let store = postgres_store_on(&table, connections).await;
    migrated(store, Cleanup::Table(table)).await
}

/// A migrated PostgreSQL store on a fresh table, over a pool of `connections`, grouping its
/// writes (`GroupCommit::POSTGRES`).
pub async fn grouped_postgres_store(label: &str, connections: u32) -> TestStore<PostgresStore> {
    postgres_store_grouped_by(
        label,
        connections,
        sangho_webhook_sqlx::GroupCommit::POSTGRES,
    )
    .await
}

/// A migrated PostgreSQL store on a fresh table, over a pool of `connections`, grouping its
/// writes by `settings`.
pub async fn postgres_store_grouped_by(
    label: &str,
    connections: u32,
    settings: sangho_webhook_sqlx::GroupCommit,
) -> TestStore<PostgresStore> {
    let mut test_store = postgres_store(label, connections).await;
    test_store.store = test_store.store.clone().with_group_commit(settings);
    test_store
}

/// A transaction on a connection of `store`'s pool that holds the row of event `id`
/// (`SELECT … FOR UPDATE`), as a handler's own transaction may: the row is free once it ends
/// (or is dropped).
pub async fn postgres_row_held(
    store: &PostgresStore,
    id: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = store.pool().begin().await.unwrap();
    let lock = format!(
        "SELECT 1 FROM {} WHERE event_id = $1 FOR UPDATE",
        store.table()
    );
    sqlx::query(sqlx::AssertSqlSafe(lock))
        .bind(id)
        .execute(&mut *holder)
        .await
        .expect("the event's row is held");
    holder
}

/// A transaction on a connection of `store`'s pool that holds the row of event `id`
/// (`SELECT … FOR UPDATE`), as a handler's own transaction may: the row is free once it ends
/// (or is dropped).
#[cfg(feature = "mariadb")]
pub async fn mariadb_row_held(
    store: &MariaDbStore,
    id: &str,
) -> sqlx::Transaction<'static, sqlx::MySql> {
    let mut holder = store.pool().begin().await.unwrap();
    let lock = format!(
        "SELECT 1 FROM {} WHERE event_id = ? FOR UPDATE",
        store.table()
    );
    sqlx::query(sqlx::AssertSqlSafe(lock))
        .bind(id)
        .execute(&mut *holder)
        .await
        .expect("the event's row is held");
    holder
}

/// A PostgreSQL store on `table` (not migrated), over a new pool of `connections`.
pub async fn postgres_store_on(table: &str, connections: u32) -> PostgresStore {
    let pool = pool_options(connections)
        .connect(&postgres_url())
        .await
        .expect("PostgreSQL is reachable (set SANGHO_TEST_POSTGRES_URL)");
    let store = PostgresStore::new(pool)
        .with_table_name(table)
        .expect("a valid table name");
    // The whole PostgreSQL suite again with grouping off: SANGHO_TEST_POSTGRES_GROUP=0.
    match std::env::var("SANGHO_TEST_POSTGRES_GROUP").as_deref() {
        Ok("0") => store.with_group_commit(sangho_webhook_sqlx::GroupCommit::OFF),
        _ => store,
    }
}

/// A migrated SQLite store in a fresh temporary file, over a pool of `connections`.
pub async fn sqlite_store(connections: u32) -> TestStore<SqliteStore> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = sqlite_store_at(&dir.path().join("webhooks.db"), connections).await;
    migrated(store, Cleanup::Dir(dir)).await
}

/// A SQLite store on the file at `path` (not migrated), as `SqliteStore::connect` configures
/// it, over a new pool of `connections`.
pub async fn sqlite_store_at(path: &std::path::Path, connections: u32) -> SqliteStore {
    let url = format!("sqlite://{}", path.display());
    let options = SqliteStore::connect_options(&url).expect("a valid URL");
    let pool = pool_options(connections)
        .connect_with(options)
        .await
        .expect("open the SQLite file");
    SqliteStore::new(pool)
}

/// Implements [`TestDatabase`] for a store type by delegating to its inherent methods, with the
/// dialect's SQL for the hand-written rows (`{table}` stands for the table name).
macro_rules! test_database {
    ($store:ty, $db:ty, backdate: $backdate:expr, seed_old: $seed_old:expr, seed_recent: $seed_recent:expr,
     provider_schema: $provider:expr, column_type: $column_type:expr,
     expired_rows: $expired_rows:expr $(,)?) => {
        #[async_trait]
        impl TestDatabase for $store {
            type Db = $db;

            fn pool(&self) -> &sqlx::Pool<$db> {
                <$store>::pool(self)
            }
            fn table(&self) -> &TableName {
                <$store>::table(self)
            }
            async fn migrate(&self) -> Result<(), sangho_webhook_sqlx::Error> {
                <$store>::migrate(self).await
            }
            fn spawn_purge(&self, retention: Duration, period: Duration) -> PurgeTask {
                <$store>::spawn_purge(self, retention, period)
            }
            async fn backdate(&self, id: &str) {
                sqlx::query(AssertSqlSafe(
                    $backdate.replace("{table}", self.table().as_str()),
                ))
                .bind(id)
                .execute(self.pool())
                .await
                .expect("back-date a row");
            }
            async fn insert_seed_row(&self, id: &str, old: bool) {
                let sql = if old { $seed_old } else { $seed_recent };
                sqlx::query(AssertSqlSafe(sql.replace("{table}", self.table().as_str())))
                    .bind(id)
                    .bind(TYPE)
                    .execute(self.pool())
                    .await
                    .expect("insert a row of the provider's recipe");
            }
            async fn event_ids(&self) -> BTreeSet<String> {
                bodies::event_ids(self.pool(), self.table()).await
            }
            async fn insert_expired_rows(&self, rows: u64) {
                sqlx::raw_sql(AssertSqlSafe(
                    $expired_rows
                        .replace("{table}", self.table().as_str())
                        .replace("{rows}", &rows.to_string()),
                ))
                .execute(self.pool())
                .await
                .expect("insert the backlog");
            }
            fn provider_schema(table: &str) -> String {
                $provider.replace("{table}", table)
            }
            async fn run_script(&self, script: &str) {
                sqlx::raw_sql(AssertSqlSafe(script.to_owned()))
                    .execute(self.pool())
                    .await
                    .expect("run a script");
            }
            async fn column_type(&self, column: &str) -> String {
                let found: Option<(String,)> = sqlx::query_as(AssertSqlSafe($column_type))
                    .bind(self.table().as_str())
                    .bind(column)
                    .fetch_optional(self.pool())
                    .await
                    .expect("read the column's type");
                found.map(|(kind,)| kind.to_lowercase()).unwrap_or_default()
            }
        }
    };
}

test_database!(
    PostgresStore,
    sqlx::Postgres,
    backdate: "UPDATE {table} SET processed_at = processed_at - INTERVAL '4 days' WHERE event_id = $1",
    seed_old: "INSERT INTO {table} (event_id, event_type, processed_at) VALUES ($1, $2, NOW() - INTERVAL '4 days')",
    seed_recent: "INSERT INTO {table} (event_id, event_type) VALUES ($1, $2)",
    provider_schema: "CREATE TABLE {table} (
           event_id     VARCHAR(50)  PRIMARY KEY,
           event_type   VARCHAR(100) NOT NULL,
           processed_at TIMESTAMP    DEFAULT NOW()
         );
         CREATE INDEX {table}_processed_at_idx ON {table} (processed_at);",
    column_type: "SELECT data_type::text FROM information_schema.columns
                  WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2",
    expired_rows: "INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
                   SELECT 'evt_backlog_' || g, 'payment_intent.succeeded', now() - INTERVAL '4 days',
                          'completed', md5(g::text), now() - INTERVAL '1 day'
                   FROM generate_series(1, {rows}) AS g",
);

test_database!(
    SqliteStore,
    sqlx::Sqlite,
    backdate: "UPDATE {table} SET processed_at = strftime('%Y-%m-%d %H:%M:%f', processed_at, '-4 days') WHERE event_id = ?1",
    seed_old: "INSERT INTO {table} (event_id, event_type, processed_at) VALUES (?1, ?2, datetime('now', '-4 days'))",
    seed_recent: "INSERT INTO {table} (event_id, event_type, processed_at) VALUES (?1, ?2, datetime('now', '+0 seconds'))",
    provider_schema: "CREATE TABLE {table} (
           event_id     VARCHAR(50)  PRIMARY KEY,
           event_type   VARCHAR(100) NOT NULL,
           processed_at TIMESTAMP    DEFAULT CURRENT_TIMESTAMP
         );
         CREATE INDEX {table}_processed_at_idx ON {table} (processed_at);",
    column_type: "SELECT type FROM pragma_table_info(?1) WHERE name = ?2",
    expired_rows: "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {rows})
                   INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
                   SELECT 'evt_backlog_' || n, 'payment_intent.succeeded', datetime('now', '-4 days'),
                          'completed', printf('%032d', n),
                          CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 86400000
                   FROM seq",
);

#[cfg(feature = "mariadb")]
test_database!(
    MariaDbStore,
    sqlx::MySql,
    backdate: "UPDATE {table} SET processed_at = processed_at - INTERVAL 4 DAY WHERE event_id = ?",
    seed_old: "INSERT INTO {table} (event_id, event_type, processed_at) VALUES (?, ?, UTC_TIMESTAMP(6) - INTERVAL 4 DAY)",
    seed_recent: "INSERT INTO {table} (event_id, event_type) VALUES (?, ?)",
    provider_schema: "CREATE TABLE {table} (
           event_id     VARCHAR(50)  PRIMARY KEY,
           event_type   VARCHAR(100) NOT NULL,
           processed_at TIMESTAMP    DEFAULT NOW()
         );
         CREATE INDEX {table}_processed_at_idx ON {table} (processed_at);",
    column_type: "SELECT CAST(column_type AS CHAR) FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?",
    expired_rows: "INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
                   SELECT CONCAT('evt_backlog_', seq), 'payment_intent.succeeded',
                          UTC_TIMESTAMP(6) - INTERVAL 4 DAY, 'completed', MD5(seq),
                          UTC_TIMESTAMP(6) - INTERVAL 1 DAY
                   FROM seq_1_to_{rows}",
);

/// A builder with the fixture secret at the fixtures' fixed time.
pub fn builder(store: impl IdempotencyStore) -> sangho_webhook::SanghoWebhookLayerBuilder {
    SanghoWebhookLayer::builder(secret(), store).with_clock(fixtures::fixed_clock)
}

/// A layer with the fixture secret at the fixtures' fixed time.
pub fn layer(store: impl IdempotencyStore) -> SanghoWebhookLayer {
    builder(store).build().expect("valid settings")
}

pub use sangho_webhook::testing::conformance::acquire;

/// Claims `id` with a fresh token: what the store found.
pub async fn claim(
    store: &dyn IdempotencyStore,
    id: &str,
    lease: Duration,
) -> Result<Claim, StoreError> {
    store
        .claim(Claimant::new(id, TYPE, &ClaimToken::generate()), lease)
        .await
}

/// Completes `id` for `token`, keeping it for `retention`.
pub async fn complete(
    store: &dyn IdempotencyStore,
    id: &str,
    token: &ClaimToken,
    retention: Duration,
) -> Completion {
    store
        .complete(Claimant::new(id, TYPE, token), retention)
        .await
        .expect("complete")
}

/// A handler that counts its calls, says when one starts, and answers 200 only once it is let
/// through ([`GatedHandler::open`]); for holding a delivery mid-handler while a test breaks
/// something.
#[derive(Clone)]
pub struct GatedHandler {
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    started: std::sync::Arc<tokio::sync::Semaphore>,
    gate: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Default for GatedHandler {
    fn default() -> Self {
        Self {
            calls: Default::default(),
            started: std::sync::Arc::new(tokio::sync::Semaphore::new(0)),
            gate: std::sync::Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl GatedHandler {
    /// How many times the handler was called.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits (at most 10 s) until a call has started.
    pub async fn started(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.started.acquire())
            .await
            .expect("the handler starts within 10 s")
            .expect("the semaphore is open")
            .forget();
    }

    /// Lets every call waiting in the handler (and every later one) answer.
    pub fn open(&self) {
        self.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    /// The handler as a tower service.
    pub fn service(
        &self,
    ) -> impl tower::Service<
        http::Request<sangho_webhook::WebhookBody>,
        Response = http::Response<http_body_util::Full<bytes::Bytes>>,
        Error = std::convert::Infallible,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static {
        let this = self.clone();
        tower::service_fn(
            move |_request: http::Request<sangho_webhook::WebhookBody>| {
                let this = this.clone();
                async move {
                    this.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    this.started.add_permits(1);
                    let _pass = this.gate.acquire().await.expect("the gate is open");
                    Ok(http::Response::new(http_body_util::Full::new(
                        bytes::Bytes::new(),
                    )))
                }
            },
        )
    }
}
