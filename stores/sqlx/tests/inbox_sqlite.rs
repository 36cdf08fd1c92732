//! Inbox mode on SQLite: the inbox conformance suite (each check on a file of its own), the
//! migration of the tables of the previous release, of the provider's schema and of inbox mode
//! before ordering keys, the purges users already run beside inbox events, the rolling deploy
//! between the two modes, the query plans of the take and the gauges, a scrape of the gauges
//! beside a million completed events, and the error `migrate` logs over connections that commit
//! below `synchronous = FULL`. Not ignored: SQLite needs no server.

mod common;

sangho_webhook::inbox_conformance!(async { common::sqlite_store(8).await.inbox_under_test() });

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use common::{
    LONG, TYPE, TestStore, acquire, bodies, claim, complete, sqlite_store, sqlite_store_at,
};
use sangho_webhook::{
    inbox::{EventState, FailedAttempt, Failure, Inbox, NextAttempt, Receipt},
    store::{Claim, Claimant, Completion},
    testing::{
        conformance::unique_event_id,
        inbox_conformance::{receive, stored, stored_with_key, take, take_event},
    },
};
use sangho_webhook_sqlx::{
    SqliteStore,
    sqlx::{self, AssertSqlSafe},
};

/// The schema of the store's previous release, as it shipped.
const PREVIOUS_RELEASE: &str = include_str!("sql/sqlite_previous_release.sql");

/// The schema of inbox mode before ordering keys.
const BEFORE_ORDERING_KEYS: &str = include_str!("sql/sqlite_before_ordering_keys.sql");

/// Inbox mode's statements whose query plans the tests check.
const TAKE: &str = include_str!("../queries/sqlite/inbox_take.sql");
const TAKE_MANY: &str = include_str!("../queries/sqlite/inbox_take_many.sql");
const GAUGES: &str = include_str!("../queries/sqlite/inbox_gauges.sql");
const RECEIVE: &str = include_str!("../queries/sqlite/inbox_receive.sql");
const RECEIVE_MANY: &str = include_str!("../queries/sqlite/inbox_receive_many.sql");
const REPLAY: &str = include_str!("../queries/sqlite/inbox_replay.sql");
const LIST: &str = include_str!("../queries/sqlite/inbox_list.sql");

/// The rows of the migration measurements unless `SANGHO_REBUILD_ROWS` says otherwise: a short
/// run, as in CI; the docs' figures are of `SANGHO_REBUILD_ROWS=1000000`.
const REBUILD_ROWS: u64 = 100_000;

/// Now as the statements write it: Unix time in milliseconds.
const NOW_MS: &str = "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

/// The provider's documented cleanup, as users run it from cron.
const PROVIDER_CLEANUP: &str =
    "DELETE FROM {table} WHERE processed_at < datetime('now', '-72 hours')";

/// Runs `sql` (`{table}` stands for the store's table) on the store's pool.
async fn run(store: &SqliteStore, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(
        sql.replace("{table}", store.table().as_str()),
    ))
    .execute(store.pool())
    .await
    .unwrap_or_else(|error| panic!("running {sql}: {error}"));
}

/// The one value `sql` answers about the store's table (`?1` stands for its name).
async fn of_the_table<T>(store: &SqliteStore, sql: &'static str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite> + Send + Unpin,
{
    sqlx::query_scalar(sql)
        .bind(store.table().as_str())
        .fetch_one(store.pool())
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

/// The statement the store's table was created with, as SQLite keeps it.
async fn created_with(store: &SqliteStore) -> String {
    of_the_table(
        store,
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
    )
    .await
}

/// Whether the store's table keeps its rows by event id (`WITHOUT ROWID`) rather than in the
/// order they were written.
async fn is_without_rowid(store: &SqliteStore) -> bool {
    of_the_table(
        store,
        "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
    )
    .await
}

/// The names of the store's table's indexes.
async fn indexes(store: &SqliteStore) -> BTreeSet<String> {
    sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1")
        .bind(store.table().as_str())
        .fetch_all(store.pool())
        .await
        .expect("the table's indexes")
        .into_iter()
        .collect()
}

/// Asserts that the store's table keeps its rows in the order they were written, has every
/// index `migrate` builds, and none of the indexes of earlier releases that held every row
/// (which it replaces by indexes of the rows their statements read); answers all its indexes.
async fn has_the_store_s_layout(store: &SqliteStore) -> BTreeSet<String> {
    assert!(
        !is_without_rowid(store).await,
        "rows by event id: {}",
        created_with(store).await
    );
    let indexes = indexes(store).await;
    for index in [
        "idx_webhook_processed_at",
        "idx_webhook_expiry",
        "idx_webhook_inbox_unfinished",
        "idx_webhook_inbox_sequence",
        "idx_webhook_fresh",
        "idx_webhook_ordering",
        "idx_webhook_key_leases",
        "idx_webhook_gauges",
    ] {
        assert!(indexes.contains(index), "{index} in {indexes:?}");
    }
    for replaced in [
        "idx_webhook_expires_at",
        "idx_webhook_unfinished",
        "idx_webhook_sequence",
    ] {
        assert!(!indexes.contains(replaced), "{replaced} in {indexes:?}");
    }
    indexes
}

/// A fresh, empty SQLite file and a store on it (not migrated); the directory goes with it.
async fn unmigrated_store() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = sqlite_store_at(&dir.path().join("upgrade.db"), 4).await;
    (store, dir)
}

/// How SQLite would run `sql` (`{table}` stands for the store's table, its parameters are
/// unbound: NULL): one line per step, as `EXPLAIN QUERY PLAN` details them.
async fn query_plan(store: &SqliteStore, sql: &str) -> Vec<String> {
    let explain = format!(
        "EXPLAIN QUERY PLAN {}",
        sql.replace("{table}", store.table().as_str())
    );
    sqlx::query_as::<_, (i64, i64, i64, String)>(AssertSqlSafe(explain))
        .fetch_all(store.pool())
        .await
        .expect("the query plan")
        .into_iter()
        .map(|(_, _, _, detail)| detail)
        .collect()
}

/// After an upgrade: a new event goes through inbox mode from receipt to completion, and is
/// a duplicate for both modes afterwards; two events of one ordering key are taken one at a
/// time, in the order of receipt.
async fn inbox_receipts_work(store: &SqliteStore) {
    let id = stored(store, "upgraded").await;
    let taken = take_event(store, &id, LONG).await;
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    assert_eq!(
        Inbox::complete(store, &claimant, LONG).await.unwrap(),
        Completion::Recorded
    );
    assert_eq!(receive(store, &id).await, Receipt::Duplicate);
    assert_eq!(claim(store, &id, LONG).await.unwrap(), Claim::Completed);

    let key = unique_event_id("key");
    let first = stored_with_key(store, "keyed", &key).await;
    let second = stored_with_key(store, "keyed", &key).await;
    let taken = take_event(store, &first, LONG).await;
    assert_eq!(taken.ordering_key.as_deref(), Some(key.as_str()));
    assert!(
        take(store, LONG).await.is_none(),
        "the key's second event waits for its first"
    );
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    assert_eq!(
        Inbox::complete(store, &claimant, LONG).await.unwrap(),
        Completion::Recorded
    );
    let taken = take_event(store, &second, LONG).await;
    assert_eq!(taken.ordering_key.as_deref(), Some(key.as_str()));
}

#[tokio::test]
async fn migrate_upgrades_a_table_of_the_previous_release_in_place_and_runs_again() {
    let (store, _dir) = unmigrated_store().await;
    run(&store, PREVIOUS_RELEASE).await;
    run(&store, "CREATE INDEX my_own_index ON {table} (event_type)").await;
    // Rows as the previous release wrote them: a live completion, a live claim, a row of
    // another tool without an expiry.
    let (completed, held, foreign) = (
        unique_event_id("completed"),
        unique_event_id("held"),
        unique_event_id("foreign"),
    );
    let now_ms = "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
    for (id, state, expires_at) in [
        (&completed, "'completed'", format!("{now_ms} + 3600000")),
        (&held, "'in_flight'", format!("{now_ms} + 3600000")),
        (&foreign, "'completed'", "NULL".to_owned()),
    ] {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (event_id, event_type, processed_at, state, claim_token, expires_at)
             VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), {state},
                     '0123456789abcdef0123456789abcdef', {expires_at})",
            store.table().as_str()
        )))
        .bind(id)
        .bind(TYPE)
        .execute(store.pool())
        .await
        .unwrap();
    }
    assert!(!created_with(&store).await.contains("'received'"));

    store
        .migrate()
        .await
        .expect("the previous release's table is upgraded");
    let after_first = created_with(&store).await;
    store.migrate().await.expect("migrate runs again");
    assert_eq!(created_with(&store).await, after_first, "no second rebuild");

    assert!(after_first.contains("'received'"), "{after_first}");
    let indexes = has_the_store_s_layout(&store).await;
    assert!(indexes.contains("my_own_index"), "{indexes:?}");
    assert_eq!(
        bodies::event_ids(store.pool(), store.table()).await,
        BTreeSet::from([completed.clone(), held.clone(), foreign.clone()])
    );
    assert_eq!(
        claim(&store, &completed, LONG).await.unwrap(),
        Claim::Completed
    );
    assert_eq!(claim(&store, &held, LONG).await.unwrap(), Claim::InFlight);
    assert_eq!(
        claim(&store, &foreign, LONG).await.unwrap(),
        Claim::Completed
    );
    assert_eq!(receive(&store, &completed).await, Receipt::Duplicate);
    assert_eq!(receive(&store, &held).await, Receipt::ClaimedByDelivery);
    inbox_receipts_work(&store).await;
}

#[tokio::test]
async fn migrate_adds_ordering_keys_to_an_inbox_table_without_them_and_keeps_its_events() {
    let (store, _dir) = unmigrated_store().await;
    run(&store, BEFORE_ORDERING_KEYS).await;
    // Events as inbox mode stored them before ordering keys: one waiting, one dead.
    let (waiting, dead) = (unique_event_id("waiting"), unique_event_id("dead"));
    for (sequence, id, state) in [(1, &waiting, "'received'"), (2, &dead, "'dead'")] {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (event_id, event_type, processed_at, state, received_at, sequence,
                             body, headers, request_path, due_at, attempts)
             VALUES (?1, ?2, NULL, {state}, {NOW_MS}, {sequence}, x'7b7d', '[]', '/webhooks',
                     {NOW_MS}, 0)",
            store.table().as_str()
        )))
        .bind(id)
        .bind(TYPE)
        .execute(store.pool())
        .await
        .unwrap();
    }

    store
        .migrate()
        .await
        .expect("the ordering key column is added");
    let after_first = created_with(&store).await;
    store.migrate().await.expect("migrate runs again");
    assert_eq!(created_with(&store).await, after_first);

    assert!(after_first.contains("ordering_key"), "{after_first}");
    has_the_store_s_layout(&store).await;
    let shown = store.show(&dead).await.unwrap().expect("the dead event");
    assert_eq!(
        (shown.summary.state, shown.summary.ordering_key),
        (EventState::Dead, None)
    );
    let gauges = store.gauges().await.unwrap();
    assert_eq!((gauges.received, gauges.in_flight, gauges.dead), (1, 0, 1));
    let taken = take_event(&store, &waiting, LONG).await;
    assert_eq!(taken.ordering_key, None);
    inbox_receipts_work(&store).await;
}

/// A migrated store holding 100,000 completed events, half of each mode.
async fn beside_100_000_completed_events() -> TestStore<SqliteStore> {
    beside_completed_events(100_000).await
}

/// A migrated store holding `rows` completed events, half of each mode.
async fn beside_completed_events(rows: u64) -> TestStore<SqliteStore> {
    let test = sqlite_store(4).await;
    run(
        &test.store,
        &completed_events(rows, "'evt_done_' || n", "x'7b7d'"),
    )
    .await;
    test
}

/// The statement that inserts `rows` completed events, half of each mode: the `n`th with the
/// id `id` gives (an SQL expression of `n`), and the inbox half with the body `body` gives.
fn completed_events(rows: u64, id: &str, body: &str) -> String {
    format!(
        "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {rows})
         INSERT INTO {{table}} (event_id, event_type, processed_at, state, claim_token,
                                expires_at, received_at, sequence, body, due_at, attempts)
         SELECT {id}, 'payment_intent.succeeded',
                strftime('%Y-%m-%d %H:%M:%f', 'now'), 'completed', printf('%032d', n),
                {NOW_MS} + 86400000, CASE WHEN n % 2 = 0 THEN {NOW_MS} END,
                CASE WHEN n % 2 = 0 THEN n END, CASE WHEN n % 2 = 0 THEN {body} END,
                NULL, 1
         FROM seq"
    )
}

/// The plans of `sql` on `store`, without and then with the statistics of `ANALYZE`: one
/// line per step, as `EXPLAIN QUERY PLAN` details them.
async fn query_plans(store: &SqliteStore, sql: &str) -> [Vec<String>; 2] {
    let without = query_plan(store, sql).await;
    run(store, "ANALYZE").await;
    [without, query_plan(store, sql).await]
}

#[tokio::test]
async fn the_gauges_read_an_index_never_the_completed_events() {
    let test = beside_100_000_completed_events().await;
    let store = test.store.clone();
    let dead = stored(&store, "dead").await;
    let taken = take_event(&store, &dead, LONG).await;
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    let attempt = FailedAttempt::new("status 500", NextAttempt::Dead);
    assert_eq!(
        store.fail(&claimant, &attempt).await.unwrap(),
        Failure::Recorded
    );
    let in_flight = stored(&store, "in_flight").await;
    take_event(&store, &in_flight, LONG).await;
    stored(&store, "waiting").await;
    // A direct-mode delivery's live claim is no inbox event.
    acquire(&store, &unique_event_id("claimed"), LONG).await;

    let gauges = store.gauges().await.unwrap();
    assert_eq!(
        (gauges.received, gauges.in_flight, gauges.dead),
        (1, 1, 1),
        "{gauges:?}"
    );
    assert!(gauges.oldest_waiting.is_some(), "{gauges:?}");
    for plan in query_plans(&store, GAUGES).await {
        assert!(
            plan.iter()
                .all(|step| step.contains("USING COVERING INDEX")),
            "{plan:#?}"
        );
    }
}

/// Beside a million completed events (`SANGHO_GAUGES_ROWS`), a scrape of the gauges takes
/// under 10 ms (the median of 21).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_a_million_completed_events_a_scrape_of_the_gauges_takes_under_10_ms() {
    let rows = bodies::env_count("SANGHO_GAUGES_ROWS", 1_000_000);
    let test = beside_completed_events(rows).await;
    let store = test.store.clone();
    for _ in 0..3 {
        stored(&store, "gauges").await;
    }
    bodies::a_scrape_of_the_gauges_takes_under_10_ms(&store, rows, 3).await;
}

/// The statement of many takes, for four workers.
fn take_many_for_four() -> String {
    TAKE_MANY.replace("{rows}", "(?, ?, ?), (?, ?, ?), (?, ?, ?), (?, ?, ?)")
}

/// The steps of a plan that read the table itself (not a `WITH` table or a subquery's rows).
fn table_reads(plan: &[String]) -> Vec<&String> {
    plan.iter()
        .filter(|step| step.starts_with("SCAN") || step.starts_with("SEARCH"))
        .filter(|step| {
            let read = step.split_whitespace().nth(1).unwrap_or_default();
            !["takes", "waiting", "fresh", "due", "next", "clock"].contains(&read)
                && !read.starts_with("(subquery-")
                && !step.contains("CONSTANT ROW")
        })
        .collect()
}

#[tokio::test]
async fn the_take_searches_its_indexes_never_the_whole_table() {
    let test = beside_100_000_completed_events().await;
    let store = test.store.clone();
    let many = take_many_for_four();
    for plan in [
        query_plans(&store, TAKE).await,
        query_plans(&store, &many).await,
    ]
    .concat()
    {
        for index in [
            "idx_webhook_fresh",
            "idx_webhook_inbox_unfinished",
            "idx_webhook_ordering",
        ] {
            assert!(
                plan.iter().any(|step| step.contains(index)),
                "{index} in {plan:#?}"
            );
        }
        for read in table_reads(&plan) {
            assert!(read.contains(" USING "), "{read} in {plan:#?}");
        }
    }
}

/// A receipt (and a replay) numbers its event from the highest sequence of receipt, which it
/// reads from one end of an index: never by scanning the completed events of either mode.
#[tokio::test]
async fn a_receipt_reads_the_highest_sequence_from_an_index() {
    let test = beside_100_000_completed_events().await;
    let store = test.store.clone();
    let many = RECEIVE_MANY.replace("{rows}", "(?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?)");
    for plan in [
        query_plans(&store, RECEIVE).await,
        query_plans(&store, &many).await,
        query_plans(&store, REPLAY).await,
    ]
    .concat()
    {
        assert!(
            plan.iter()
                .any(|step| step.contains("COVERING INDEX idx_webhook_inbox_sequence")),
            "{plan:#?}"
        );
        let table = format!(" {} ", store.table().as_str());
        for read in plan.iter().filter(|step| step.contains(&table)) {
            assert!(read.contains(" USING "), "{read} in {plan:#?}");
        }
    }
}

/// The operators' list reads the inbox events in the order of receipt from an index: it
/// neither reads the completed events of today's mode nor sorts what it found.
#[tokio::test]
async fn the_list_reads_the_inbox_events_in_index_order() {
    let test = beside_100_000_completed_events().await;
    let store = test.store.clone();
    for plan in query_plans(&store, LIST).await {
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX idx_webhook_inbox_sequence")),
            "{plan:#?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("TEMP B-TREE")),
            "{plan:#?}"
        );
    }
}

/// The statement of many takes reads the due events in the order of its indexes, stopping
/// after as many as workers wait: neither search sorts what it found (a sort would read every
/// due event of a backlog first).
#[tokio::test]
async fn the_takes_of_a_group_read_the_due_events_in_index_order() {
    let test = beside_100_000_completed_events().await;
    let store = test.store.clone();
    let explain = format!(
        "EXPLAIN QUERY PLAN {}",
        take_many_for_four().replace("{table}", store.table().as_str())
    );
    for analyzed in [false, true] {
        if analyzed {
            run(&store, "ANALYZE").await;
        }
        let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(AssertSqlSafe(explain.clone()))
            .fetch_all(store.pool())
            .await
            .expect("the query plan");
        for search in ["MATERIALIZE fresh", "MATERIALIZE due"] {
            let (id, ..) = plan
                .iter()
                .find(|(.., detail)| detail == search)
                .unwrap_or_else(|| panic!("{search} in {plan:#?}"));
            let sorts = plan.iter().filter(|(_, parent, _, detail)| {
                parent == id && detail.starts_with("USE TEMP B-TREE")
            });
            assert_eq!(sorts.count(), 0, "{search} sorts in {plan:#?}");
        }
    }
}

/// The take tests a candidate's ordering key by two searches of indexes, each bounded so that
/// it stops at its first entry: the key's unfinished events received before the candidate (at
/// most one row read), and the key's events in flight under a live lease (the index alone).
/// However many events of the key wait, the test reads at most one of their rows.
#[tokio::test]
async fn the_take_tests_an_ordering_key_by_two_bounded_searches() {
    let test = beside_100_000_completed_events().await;
    let store = test.store.clone();
    let many = take_many_for_four();
    for plan in [
        query_plans(&store, TAKE).await,
        query_plans(&store, &many).await,
    ]
    .concat()
    {
        for expected in [
            "SEARCH k USING INDEX idx_webhook_ordering (ordering_key=? AND sequence<?)",
            "SEARCH k USING COVERING INDEX idx_webhook_key_leases (ordering_key=? AND due_at>?)",
        ] {
            assert_eq!(
                plan.iter().filter(|step| *step == expected).count(),
                2,
                "{expected} once per search in {plan:#?}"
            );
        }
        let key_reads = plan.iter().filter(|step| step.starts_with("SEARCH k"));
        assert_eq!(key_reads.count(), 4, "{plan:#?}");
    }
}

#[tokio::test]
async fn migrate_upgrades_a_table_of_the_provider_schema_and_runs_again() {
    let (store, _dir) = unmigrated_store().await;
    run(
        &store,
        &<SqliteStore as bodies::TestDatabase>::provider_schema("{table}"),
    )
    .await;
    let (recent, old) = (unique_event_id("recent"), unique_event_id("old"));
    <SqliteStore as bodies::TestDatabase>::insert_seed_row(&store, &recent, false).await;
    <SqliteStore as bodies::TestDatabase>::insert_seed_row(&store, &old, true).await;

    store
        .migrate()
        .await
        .expect("the provider's table is adopted");
    store.migrate().await.expect("migrate runs again");

    assert!(created_with(&store).await.contains("'received'"));
    has_the_store_s_layout(&store).await;
    // Counted as completed for the adopted retention (72 hours): the recent row is a
    // duplicate, the four-day-old one is forgotten.
    assert_eq!(
        claim(&store, &recent, LONG).await.unwrap(),
        Claim::Completed
    );
    assert_eq!(receive(&store, &recent).await, Receipt::Duplicate);
    assert_eq!(receive(&store, &old).await, Receipt::Stored);
    take_event(&store, &old, LONG).await;
    inbox_receipts_work(&store).await;
}

#[tokio::test]
async fn migrate_rebuilds_a_provider_table_the_previous_release_adopted() {
    let (store, _dir) = unmigrated_store().await;
    run(
        &store,
        &<SqliteStore as bodies::TestDatabase>::provider_schema("{table}"),
    )
    .await;
    // What the previous release's migration added to it.
    run(
        &store,
        "ALTER TABLE {table} ADD COLUMN state VARCHAR(9) NOT NULL DEFAULT 'completed' \
             CHECK (state IN ('in_flight', 'completed'));
         ALTER TABLE {table} ADD COLUMN claim_token VARCHAR(32);
         ALTER TABLE {table} ADD COLUMN expires_at INTEGER;",
    )
    .await;
    let recent = unique_event_id("recent");
    <SqliteStore as bodies::TestDatabase>::insert_seed_row(&store, &recent, false).await;

    store.migrate().await.expect("the adopted table is rebuilt");
    store.migrate().await.expect("migrate runs again");

    assert!(created_with(&store).await.contains("'received'"));
    let indexes = has_the_store_s_layout(&store).await;
    assert!(
        indexes.contains("processed_webhook_events_processed_at_idx"),
        "{indexes:?}"
    );
    assert_eq!(
        claim(&store, &recent, LONG).await.unwrap(),
        Claim::Completed
    );
    inbox_receipts_work(&store).await;
}

/// The events of [`unfinished_inbox_events_beside_expired_completions`].
struct Unfinished {
    waiting: String,
    lease_run_out: String,
    retrying: String,
    dead: String,
    expired: [String; 2],
}

/// A table holding a waiting, an in-flight (its lease run out), a retrying and a dead inbox
/// event, and two completions past their retention (one of each mode) whose `processed_at`
/// is four days old.
async fn unfinished_inbox_events_beside_expired_completions(store: &SqliteStore) -> Unfinished {
    let retrying = stored(store, "retrying").await;
    let taken = take_event(store, &retrying, LONG).await;
    let attempt = FailedAttempt::new("status 500", NextAttempt::After(LONG));
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    assert_eq!(
        store.fail(&claimant, &attempt).await.unwrap(),
        Failure::Recorded
    );
    let dead = stored(store, "dead").await;
    let taken = take_event(store, &dead, LONG).await;
    let attempt = FailedAttempt::new("status 500", NextAttempt::Dead);
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    assert_eq!(
        store.fail(&claimant, &attempt).await.unwrap(),
        Failure::Recorded
    );
    let inbox_completed = stored(store, "inbox_done").await;
    let taken = take_event(store, &inbox_completed, LONG).await;
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    assert_eq!(
        Inbox::complete(store, &claimant, Duration::from_millis(1))
            .await
            .unwrap(),
        Completion::Recorded
    );
    let direct_completed = unique_event_id("direct_done");
    let token = acquire(store, &direct_completed, LONG).await;
    assert_eq!(
        complete(store, &direct_completed, &token, Duration::from_millis(1)).await,
        Completion::Recorded
    );
    // Taken last: its lease runs out, and nothing takes it over.
    let lease_run_out = stored(store, "lease_out").await;
    take_event(store, &lease_run_out, Duration::from_millis(1)).await;
    let waiting = stored(store, "waiting").await;
    run(
        store,
        "UPDATE {table} SET processed_at = datetime('now', '-4 days')
         WHERE processed_at IS NOT NULL",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    Unfinished {
        waiting,
        lease_run_out,
        retrying,
        dead,
        expired: [inbox_completed, direct_completed],
    }
}

/// Runs `purge` on a fresh table of [`unfinished_inbox_events_beside_expired_completions`]:
/// only the expired completions go, and the unfinished events keep their states.
async fn purge_keeps_every_unfinished_inbox_event<F, Fut>(purge: F)
where
    F: FnOnce(TestStore<SqliteStore>) -> Fut,
    Fut: std::future::Future<Output = TestStore<SqliteStore>>,
{
    let store = sqlite_store(4).await;
    let events = unfinished_inbox_events_beside_expired_completions(&store.store).await;
    // A restart's migration, adopting rows without an expiry for no retention at all: it must
    // leave the inbox events' expiry alone.
    let restarted = store.store.clone().with_adopted_retention(Duration::ZERO);
    restarted.migrate().await.expect("migrate runs again");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let store = purge(store).await;
    let left = bodies::event_ids(store.pool(), store.table()).await;
    for expired in &events.expired {
        assert!(!left.contains(expired), "{expired} is purged: {left:?}");
    }
    let unfinished = [
        (&events.waiting, EventState::Received),
        (&events.lease_run_out, EventState::InFlight),
        (&events.retrying, EventState::Received),
        (&events.dead, EventState::Dead),
    ];
    assert_eq!(left.len(), unfinished.len(), "{left:?}");
    for (id, state) in unfinished {
        let shown = store.show(id).await.unwrap().expect("the event is kept");
        assert_eq!(shown.summary.state, state, "{id}");
    }
}

#[tokio::test]
async fn the_store_s_purge_never_deletes_an_unfinished_inbox_event() {
    purge_keeps_every_unfinished_inbox_event(|store| async move {
        // Retention zero: every row without an expiry that has a `processed_at` would go.
        store.purge(Duration::ZERO).await.expect("purge");
        store
    })
    .await;
}

#[tokio::test]
async fn the_cron_purge_never_deletes_an_unfinished_inbox_event() {
    purge_keeps_every_unfinished_inbox_event(|store| async move {
        let cron = store.cron_purge_sql();
        run(&store.store, &cron).await;
        store
    })
    .await;
}

#[tokio::test]
async fn the_provider_s_cleanup_never_deletes_an_unfinished_inbox_event() {
    purge_keeps_every_unfinished_inbox_event(|store| async move {
        run(&store.store, PROVIDER_CLEANUP).await;
        store
    })
    .await;
}

/// The entries of each index of the store's table, as `ANALYZE` counts them (an index without
/// entries has no row; the primary key's, every row, is not counted).
async fn index_entries(store: &SqliteStore) -> BTreeMap<String, u64> {
    run(store, "ANALYZE").await;
    let stats: Vec<(String, String)> = sqlx::query_as(
        "SELECT idx, stat FROM sqlite_stat1
         WHERE tbl = ?1 AND idx <> tbl AND idx NOT LIKE 'sqlite_autoindex_%'",
    )
    .bind(store.table().as_str())
    .fetch_all(store.pool())
    .await
    .expect("the statistics");
    stats
        .into_iter()
        .map(|(index, stat)| {
            let entries = stat.split(' ').next().and_then(|n| n.parse().ok());
            (index, entries.expect("the entries first"))
        })
        .collect()
}

/// Each mode's rows are entries only of the indexes its statements read: today's claims and
/// completions are not in inbox mode's indexes, and waiting inbox events, which have no expiry
/// yet, are not in the purge's. An entry the statements never look for would cost a page
/// written at every write of its row.
#[tokio::test]
async fn each_mode_s_rows_are_entries_only_of_the_indexes_that_mode_reads() {
    let test = sqlite_store(4).await;
    let store = test.store.clone();
    for n in 0..100 {
        let id = unique_event_id("direct");
        let token = acquire(&store, &id, LONG).await;
        if n % 2 == 0 {
            assert_eq!(
                complete(&store, &id, &token, LONG).await,
                Completion::Recorded
            );
        }
    }
    for _ in 0..100 {
        stored(&store, "waiting").await;
    }

    let entries = index_entries(&store).await;
    let total: u64 = entries.values().sum();
    assert_eq!(total, 200 + 100 + 4 * 100, "{entries:?}");
    let of = |index: &str| entries.get(index).copied().unwrap_or(0);
    // The provider's index, kept as the provider documents it: every row.
    assert_eq!(of("idx_webhook_processed_at"), 200, "{entries:?}");
    // The purge's: the 100 rows of today's mode, each with its expiry.
    assert_eq!(of("idx_webhook_expiry"), 100, "{entries:?}");
    // Inbox mode's: the 100 waiting events, and nothing else.
    for index in [
        "idx_webhook_inbox_sequence",
        "idx_webhook_inbox_unfinished",
        "idx_webhook_fresh",
        "idx_webhook_gauges",
    ] {
        assert_eq!(of(index), 100, "{index} in {entries:?}");
    }
}

/// The pages the commit of one statement of `receipts` receipts (the statement a group
/// commit writes them with, each with a 2 KiB body and a fresh random id) writes to the WAL.
async fn wal_pages_of_receipts(store: &SqliteStore, receipts: usize) -> i64 {
    let statement = RECEIVE_MANY
        .replace("{table}", store.table().as_str())
        .replace(
            "{rows}",
            &vec!["(?, ?, ?, ?, ?, NULL)"; receipts].join(", "),
        );
    let mut connection = store.pool().acquire().await.expect("a connection");
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut *connection)
        .await
        .expect("an empty WAL");
    // Random ids, as the provider's are: each new id has its own place among the others.
    let ids: Vec<String> = sqlx::query_scalar(
        "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < ?1)
         SELECT 'evt_' || lower(hex(randomblob(12))) FROM seq",
    )
    .bind(receipts as i64)
    .fetch_all(&mut *connection)
    .await
    .expect("random ids");
    let mut query = sqlx::query(AssertSqlSafe(statement));
    for id in ids {
        query = query
            .bind(id)
            .bind(TYPE)
            .bind(vec![b'x'; 2048])
            .bind(r#"[["content-type","application/json"]]"#)
            .bind("/webhooks/sangho");
    }
    let stored = query.execute(&mut *connection).await.expect("the receipts");
    assert_eq!(stored.rows_affected(), receipts as u64);
    let (_, pages, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(&mut *connection)
        .await
        .expect("the WAL's pages");
    pages
}

/// A group of receipts appends its rows: each new row (a 2 KiB body) takes about one page of
/// the WAL, plus a page of the event id index each, and the pages its statements' indexes end
/// in. Kept by event id instead (`WITHOUT ROWID`), each row went to a page at a random place
/// that often split, and its body's end to an overflow page: about five pages a receipt.
#[tokio::test]
async fn a_group_of_receipts_writes_about_two_pages_a_receipt() {
    let test = sqlite_store(4).await;
    let store = test.store.clone();
    has_the_store_s_layout(&store).await;
    // A table of 10 000 waiting events with random ids (the ids' index has many pages).
    run(
        &store,
        &format!(
            "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 10000)
             INSERT INTO {{table}} (event_id, event_type, processed_at, state, received_at,
                                    sequence, body, headers, request_path, due_at)
             SELECT 'evt_' || lower(hex(randomblob(12))), 'payment_intent.succeeded', NULL,
                    'received', {NOW_MS}, n, randomblob(2048), '[]', '/webhooks/sangho', {NOW_MS}
             FROM seq"
        ),
    )
    .await;
    let mut pages = Vec::new();
    for _ in 0..5 {
        pages.push(wal_pages_of_receipts(&store, 32).await);
    }
    pages.sort_unstable();
    let median = pages[2];
    assert!(
        median <= 3 * 32,
        "{median} pages for 32 receipts (runs: {pages:?})"
    );
}

#[tokio::test]
async fn a_direct_mode_claim_of_an_inbox_event_is_a_duplicate_in_every_state() {
    let test = sqlite_store(4).await;
    let store = test.store.clone();
    let waiting = stored(&store, "waiting").await;
    assert_eq!(
        claim(&store, &waiting, LONG).await.unwrap(),
        Claim::Completed
    );
    let taken = take_event(&store, &waiting, LONG).await;
    assert_eq!(
        claim(&store, &waiting, LONG).await.unwrap(),
        Claim::Completed
    );
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    let attempt = FailedAttempt::new("status 500", NextAttempt::Dead);
    assert_eq!(
        store.fail(&claimant, &attempt).await.unwrap(),
        Failure::Recorded
    );
    assert_eq!(
        claim(&store, &waiting, LONG).await.unwrap(),
        Claim::Completed
    );
    // The claim changed nothing: the worker's event is still the inbox's.
    let shown = store
        .show(&waiting)
        .await
        .unwrap()
        .expect("still in the inbox");
    assert_eq!(shown.summary.state, EventState::Dead);
}

#[tokio::test]
async fn an_inbox_receipt_of_a_direct_mode_event_answers_as_the_direct_mode_holds_it() {
    let test = sqlite_store(4).await;
    let store = test.store.clone();
    let held = unique_event_id("held");
    let token = acquire(&store, &held, LONG).await;
    assert_eq!(receive(&store, &held).await, Receipt::ClaimedByDelivery);
    assert_eq!(
        complete(&store, &held, &token, LONG).await,
        Completion::Recorded
    );
    assert_eq!(receive(&store, &held).await, Receipt::Duplicate);
    assert!(
        store.show(&held).await.unwrap().is_none(),
        "not an inbox event"
    );

    // A claim whose lease ran out is taken over by the receipt.
    let abandoned = unique_event_id("abandoned");
    acquire(&store, &abandoned, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(receive(&store, &abandoned).await, Receipt::Stored);
    take_event(&store, &abandoned, LONG).await;
}

#[tokio::test]
async fn a_direct_mode_claim_takes_over_an_expired_inbox_completion_and_clears_its_columns() {
    let test = sqlite_store(4).await;
    let store = test.store.clone();
    let id = stored(&store, "expired").await;
    let taken = take_event(&store, &id, LONG).await;
    let claimant = Claimant::new(&taken.event_id, &taken.event_type, &taken.token);
    assert_eq!(
        Inbox::complete(&store, &claimant, Duration::from_millis(1))
            .await
            .unwrap(),
        Completion::Recorded
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    acquire(&store, &id, LONG).await;
    let (received_at, body, attempts): (Option<i64>, Option<Vec<u8>>, i64) =
        sqlx::query_as(AssertSqlSafe(
            "SELECT received_at, body, attempts FROM {table} WHERE event_id = ?1"
                .replace("{table}", store.table().as_str()),
        ))
        .bind(&id)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!((received_at, body, attempts), (None, None, 0));
    assert!(
        store.show(&id).await.unwrap().is_none(),
        "no longer an inbox event"
    );
    assert_eq!(receive(&store, &id).await, Receipt::ClaimedByDelivery);
}

/// Creates a table by `schema`, fills it with `SANGHO_REBUILD_ROWS` rows ([`REBUILD_ROWS`] by
/// default) by the statement `fill` writes for that count, times `migrate()` on it, asserts
/// the store's layout afterwards, and prints the time per million rows.
async fn time_the_upgrade(done: &str, schema: &str, fill: impl Fn(u64) -> String) {
    let rows = bodies::env_count("SANGHO_REBUILD_ROWS", REBUILD_ROWS);
    let (store, _dir) = unmigrated_store().await;
    run(&store, schema).await;
    run(&store, &fill(rows)).await;
    let started = std::time::Instant::now();
    store.migrate().await.expect("the upgrade");
    let took = started.elapsed();
    has_the_store_s_layout(&store).await;
    assert!(created_with(&store).await.contains("'received'"));
    let per_million = took.as_secs_f64() * 1_000_000.0 / rows as f64;
    println!("{done} {rows} rows in {took:.2?}: {per_million:.2} s per million rows");
}

/// How long `migrate` takes to rebuild a table of the previous release holding
/// `SANGHO_REBUILD_ROWS` rows ([`REBUILD_ROWS`] by default), printed per million rows. Run with
/// `SANGHO_REBUILD_ROWS=1000000 cargo test -p sangho-webhook-sqlx --all-features --test
/// inbox_sqlite -- --ignored --nocapture the_rebuild_s_time`.
#[tokio::test]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn the_rebuild_s_time_per_million_rows() {
    time_the_upgrade("rebuilt", PREVIOUS_RELEASE, |rows| {
        format!(
            "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {rows})
             INSERT INTO {{table}} (event_id, event_type, processed_at, state, claim_token,
                                    expires_at)
             SELECT 'evt_' || printf('%024d', n), 'payment_intent.succeeded',
                    strftime('%Y-%m-%d %H:%M:%f', 'now'), 'completed', printf('%032d', n),
                    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 86400000
             FROM seq"
        )
    })
    .await;
}

/// How long `migrate()` takes to replace the indexes of every row that earlier releases built by
/// the indexes of each mode's rows, on a table it does not rebuild (rows in the order written)
/// of `SANGHO_REBUILD_ROWS` completed events ([`REBUILD_ROWS`] by default, half of each mode),
/// printed per million rows. Run with `--ignored --nocapture the_index_replacement_s_time`.
#[tokio::test]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn the_index_replacement_s_time_per_million_rows() {
    let rows = bodies::env_count("SANGHO_REBUILD_ROWS", REBUILD_ROWS);
    let test = beside_completed_events(rows).await;
    let store = test.store.clone();
    run(
        &store,
        "DROP INDEX idx_webhook_expiry;
         DROP INDEX idx_webhook_inbox_unfinished;
         DROP INDEX idx_webhook_inbox_sequence;
         CREATE INDEX idx_webhook_expires_at ON {table} (expires_at);
         CREATE INDEX idx_webhook_unfinished ON {table} (sequence)
             WHERE state IN ('received', 'in_flight');
         CREATE INDEX idx_webhook_sequence ON {table} (sequence);",
    )
    .await;
    let started = std::time::Instant::now();
    store.migrate().await.expect("the indexes replaced");
    let took = started.elapsed();
    has_the_store_s_layout(&store).await;
    let per_million = took.as_secs_f64() * 1_000_000.0 / rows as f64;
    println!(
        "replaced the indexes of {rows} rows in {took:.2?}: {per_million:.2} s per million rows"
    );
}

/// How long `migrate()` takes to upgrade an inbox table of an earlier release (rows kept by
/// event id, `WITHOUT ROWID`, indexes of every row, no ordering keys) holding
/// `SANGHO_REBUILD_ROWS` completed events ([`REBUILD_ROWS`] by default, half of each mode, the
/// inbox half with a 2 KiB body), printed per million rows. It rebuilds the table. Run with
/// `--ignored --nocapture the_upgrade_of_an_inbox_table`.
#[tokio::test]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn the_upgrade_of_an_inbox_table_s_time_per_million_rows() {
    time_the_upgrade("upgraded", BEFORE_ORDERING_KEYS, |rows| {
        completed_events(
            rows,
            "'evt_' || lower(hex(randomblob(12)))",
            "randomblob(2048)",
        )
    })
    .await;
}

#[tokio::test]
async fn the_direct_mode_s_completion_of_an_inbox_event_its_worker_holds_records_it() {
    let test = sqlite_store(4).await;
    let store = test.store.clone();
    let id = stored(&store, "complete_in").await;
    let taken = take_event(&store, &id, LONG).await;
    // What `complete_in` runs inside a handler's transaction, with the worker's token.
    assert_eq!(
        complete(&store, &id, &taken.token, LONG).await,
        Completion::Recorded
    );
    let (processed_at, due_at): (Option<String>, Option<i64>) = sqlx::query_as(AssertSqlSafe(
        "SELECT processed_at, due_at FROM {table} WHERE event_id = ?1"
            .replace("{table}", store.table().as_str()),
    ))
    .bind(&id)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(processed_at.is_some(), "completed now");
    assert_eq!(due_at, None);
    let shown = store
        .show(&id)
        .await
        .unwrap()
        .expect("kept for its retention");
    assert_eq!(shown.summary.state, EventState::Completed);
    assert_eq!(receive(&store, &id).await, Receipt::Duplicate);
}

/// The errors logged while a store over `options` migrates a fresh file.
async fn errors_of_migrate_over(
    options: impl FnOnce(&str) -> sqlx::sqlite::SqliteConnectOptions,
) -> Vec<common::logs::Logged> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("inbox.db").display());
    let (logs, _guard) = common::logs::Logs::capture();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options(&url))
        .await
        .unwrap();
    SqliteStore::new(pool).migrate().await.unwrap();
    logs.matching("")
        .into_iter()
        .filter(|event| event.level == tracing::Level::ERROR)
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn migrate_logs_an_error_over_a_pool_of_the_user_s_own_below_synchronous_full() {
    let errors = errors_of_migrate_over(|url| {
        url.parse::<sqlx::sqlite::SqliteConnectOptions>()
            .unwrap()
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
    })
    .await;
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0]
            .message
            .contains("commit with synchronous below FULL"),
        "{errors:#?}"
    );
    assert_eq!(errors[0].fields["synchronous"], "1", "NORMAL");
}

#[tokio::test(flavor = "current_thread")]
async fn migrate_logs_no_error_over_a_pool_of_the_store_s_connect_options() {
    let errors = errors_of_migrate_over(|url| SqliteStore::connect_options(url).unwrap()).await;
    assert!(errors.is_empty(), "{errors:#?}");
}

/// The workers' takes and completions written together by the group commit
/// (`common/turns.rs`): a group's takes are one statement of many takes.
mod groups {
    use crate::common::{sqlite_store, turns};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn takes_served_together_never_take_two_events_of_one_key() {
        let store = sqlite_store(1).await;
        turns::takes_served_together_never_take_two_events_of_one_key(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_take_given_up_while_it_waits_for_its_group_takes_nothing() {
        let store = sqlite_store(1).await;
        turns::a_take_given_up_while_it_waits_for_its_turn_takes_nothing(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn completions_served_together_each_answer_for_their_own_token() {
        let store = sqlite_store(1).await;
        turns::completions_served_together_each_answer_for_their_own_token(&store.store).await;
    }
}
