//! Inbox mode on MariaDB: the inbox conformance suite, each check in a table of its own, and
//! what only an existing table shows: the upgrade of a table of the previous release, of the
//! provider's schema or of inbox mode before ordering keys, the purges users already run, and a
//! rolling deploy beside the direct mode; the lock of an ordering key around its receipts; the
//! gauges beside a million completed events; and the error `migrate` logs on a server (of the
//! test's own, `common/private_mariadb.rs`) whose settings can lose an acknowledged receipt in
//! a crash.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx --features mariadb --
//! --include-ignored`, against `SANGHO_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`) and, for the settings, MariaDB's server binaries
//! (`mariadb-install-db`, `mariadbd`).

mod common;

use common::mariadb_store;

sangho_webhook::inbox_conformance!(
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    => async { mariadb_store("inbox", 16).await.inbox_under_test() }
);

use std::time::Duration;

use bytes::Bytes;
use common::{LONG, TYPE, acquire, bodies::TestDatabase as _, mariadb_store_on};
use sangho_webhook::{
    inbox::{FailedAttempt, Inbox, NextAttempt, Receipt, ReceivedEvent, TakeOrder, TakenEvent},
    store::{Claim, ClaimToken, Completion, StoreError},
    testing::conformance::{PAST_SHORT, SHORT, unique_event_id},
};
use sangho_webhook_sqlx::{
    MariaDbStore,
    sqlx::{self, AssertSqlSafe, Connection, mysql::MySqlConnection},
};

/// The schema of the store's previous release, as it shipped.
const PREVIOUS_RELEASE: &str = include_str!("fixtures/mariadb_previous_release.sql");

/// The schema of inbox mode before ordering keys.
const BEFORE_ORDERING_KEYS: &str = include_str!("fixtures/mariadb_inbox_before_ordering_keys.sql");

/// Receives `id` (a small body, its path), and answers what the inbox found.
async fn receive(store: &MariaDbStore, id: &str) -> Receipt {
    receive_with_key(store, id, None).await.expect("receive")
}

/// Receives `id` with the ordering key `key`: what the inbox found, or its error.
async fn receive_with_key(
    store: &MariaDbStore,
    id: &str,
    key: Option<&str>,
) -> Result<Receipt, StoreError> {
    let body = Bytes::from(format!(r#"{{"id":"{id}"}}"#));
    let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    let event = ReceivedEvent::new(id, TYPE, &body, &headers, "/webhooks").with_ordering_key(key);
    store.receive(&event).await
}

/// Takes the next due event, new events first, for a long lease.
async fn take(store: &MariaDbStore) -> Option<TakenEvent> {
    store
        .take(&ClaimToken::generate(), LONG, TakeOrder::FreshFirst)
        .await
        .expect("take")
}

/// Two events of one new ordering key: the first is taken with its key, the second only once
/// the first completes.
async fn keyed_events_are_taken_one_at_a_time(store: &MariaDbStore) {
    let key = unique_event_id("key");
    let (first, second) = (unique_event_id("first"), unique_event_id("second"));
    for id in [&first, &second] {
        let receipt = receive_with_key(store, id, Some(&key)).await;
        assert_eq!(receipt.expect("receive"), Receipt::Stored);
    }
    let taken = take(store).await.expect("the key's first event");
    assert_eq!(taken.event_id, first);
    assert_eq!(taken.ordering_key.as_deref(), Some(key.as_str()));
    assert!(take(store).await.is_none(), "the key's second event waits");
    let completed = store.complete(&taken.claimant(), LONG).await.unwrap();
    assert_eq!(completed, Completion::Recorded);
    let taken = take(store).await.expect("the key's second event");
    assert_eq!(taken.event_id, second);
    let completed = store.complete(&taken.claimant(), LONG).await.unwrap();
    assert_eq!(completed, Completion::Recorded);
}

/// The table's InnoDB tablespace and table id: others after a copy or a rebuild.
async fn tablespace(store: &MariaDbStore) -> (i64, i64) {
    sqlx::query_as(
        "SELECT CAST(space AS SIGNED), CAST(table_id AS SIGNED) \
         FROM information_schema.innodb_sys_tables WHERE name = CONCAT(DATABASE(), '/', ?)",
    )
    .bind(store.table().as_str())
    .fetch_one(store.pool())
    .await
    .expect("the table's tablespace")
}

/// Runs `sql` (`{table}` stands for the store's table) with the text binds `binds`.
async fn run(store: &MariaDbStore, sql: &str, binds: &[&str]) -> u64 {
    let sql = sql.replace("{table}", store.table().as_str());
    binds
        .iter()
        .fold(sqlx::query(AssertSqlSafe(sql)), |query, bind| {
            query.bind(*bind)
        })
        .execute(store.pool())
        .await
        .expect("run a statement")
        .rows_affected()
}

/// Whether the table holds a row for `id`.
async fn holds(store: &MariaDbStore, id: &str) -> bool {
    store.event_ids().await.contains(id)
}

/// A table of the previous release (or of the provider's schema: `provider`), its rows, the
/// upgrade by `migrate` twice: the rows keep their meaning, and inbox receipts work.
async fn upgrade(label: &str, provider: bool) {
    let table = common::unique_table(label);
    let _cleanup = common::MariaDbTableGuard(table.clone());
    let store = mariadb_store_on(&table, 4).await;
    let (completed, in_flight) = (unique_event_id("done"), unique_event_id("held"));
    if provider {
        store
            .run_script(&MariaDbStore::provider_schema(&table))
            .await;
        store.insert_seed_row(&completed, false).await;
    } else {
        let script = PREVIOUS_RELEASE
            .replace(
                "idx_webhook_processed_at",
                &format!("{table}_processed_at_idx"),
            )
            .replace("idx_webhook_expires_at", &format!("{table}_expires_at_idx"))
            .replace("processed_webhook_events", &table);
        store.run_script(&script).await;
        run(
            &store,
            "INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
             VALUES (?, 'charge.succeeded', UTC_TIMESTAMP(6), 'completed', REPEAT('a', 32),
                     UTC_TIMESTAMP(6) + INTERVAL 1 DAY),
                    (?, 'charge.succeeded', UTC_TIMESTAMP(6), 'in_flight', REPEAT('b', 32),
                     UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
            &[&completed, &in_flight],
        )
        .await;
    }
    store.migrate().await.expect("migrate");
    store.migrate().await.expect("migrate again");
    assert_eq!(
        common::claim(&store, &completed, LONG).await.unwrap(),
        Claim::Completed,
        "a completed event of the old table is still a duplicate"
    );
    assert_eq!(receive(&store, &completed).await, Receipt::Duplicate);
    if !provider {
        assert_eq!(
            common::claim(&store, &in_flight, LONG).await.unwrap(),
            Claim::InFlight
        );
        assert_eq!(
            receive(&store, &in_flight).await,
            Receipt::ClaimedByDelivery
        );
    }
    let fresh = unique_event_id("fresh");
    assert_eq!(receive(&store, &fresh).await, Receipt::Stored);
    let taken = store
        .take(&ClaimToken::generate(), LONG, Default::default())
        .await
        .unwrap()
        .expect("the receipt is due");
    assert_eq!(taken.event_id, fresh);
    assert_eq!(
        store.complete(&taken.claimant(), LONG).await.unwrap(),
        Completion::Recorded
    );
    keyed_events_are_taken_one_at_a_time(&store).await;
    store
        .migrate()
        .await
        .expect("migrate once more, up to date");
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn migrate_upgrades_a_table_of_the_previous_release_in_place() {
    upgrade("prev", false).await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn migrate_upgrades_a_table_of_the_provider_schema_in_place() {
    upgrade("provider", true).await;
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn migrate_adds_ordering_keys_to_an_inbox_table_in_place() {
    let table = common::unique_table("keys");
    let _cleanup = common::MariaDbTableGuard(table.clone());
    let store = mariadb_store_on(&table, 4).await;
    let script = ["processed_at", "expires_at", "unfinished", "leases"]
        .iter()
        .fold(BEFORE_ORDERING_KEYS.to_owned(), |script, index| {
            script.replace(
                &format!("idx_webhook_{index}"),
                &format!("{table}_{index}_idx"),
            )
        })
        .replace("processed_webhook_events", &table);
    store.run_script(&script).await;
    let (waiting, held) = (unique_event_id("waiting"), unique_event_id("held"));
    run(
        &store,
        "INSERT INTO {table} (event_id, event_type, state, received_at, sequence, body, headers,
                              request_path, due_at, attempts)
         VALUES (?, 'charge.succeeded', 'received', UTC_TIMESTAMP(6), NEXTVAL({table}_sequence),
                 '{}', '[]', '/webhooks', UTC_TIMESTAMP(6), 0),
                (?, 'charge.succeeded', 'in_flight', UTC_TIMESTAMP(6), NEXTVAL({table}_sequence),
                 '{}', '[]', '/webhooks', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 1)",
        &[&waiting, &held],
    )
    .await;
    assert_eq!(store.column_type("ordering_key").await, "");
    let before = tablespace(&store).await;

    store.migrate().await.expect("migrate");
    store.migrate().await.expect("migrate again");
    assert_eq!(tablespace(&store).await, before, "the table is not rebuilt");
    assert_eq!(store.column_type("ordering_key").await, "varchar(200)");
    let indexes = index_names(&store).await;
    for index in ["queue", "lease_ends", "new_events", "key_order"] {
        let name = format!("{table}_{index}_idx");
        assert!(indexes.contains(&name), "{name} built: {indexes:?}");
    }
    // The earlier release's instances name its indexes in their statements: they are kept.
    for index in ["unfinished", "leases"] {
        let name = format!("{table}_{index}_idx");
        assert!(indexes.contains(&name), "{name} kept: {indexes:?}");
    }
    let taken = take(&store)
        .await
        .expect("the waiting event of the old table");
    assert_eq!(
        (taken.event_id.as_str(), taken.ordering_key),
        (waiting.as_str(), None)
    );
    assert!(take(&store).await.is_none(), "{held} is in flight");
    keyed_events_are_taken_one_at_a_time(&store).await;
}

/// The names of the indexes of `store`'s table.
async fn index_names(store: &MariaDbStore) -> std::collections::BTreeSet<String> {
    let names: Vec<(String,)> = sqlx::query_as(
        "SELECT DISTINCT index_name FROM information_schema.statistics
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(store.table().as_str())
    .fetch_all(store.pool())
    .await
    .unwrap();
    names.into_iter().map(|(name,)| name).collect()
}

/// The value of each column of `id`'s row (as text; NULL as `None`), by column name.
async fn row_of(store: &MariaDbStore, id: &str) -> Vec<(String, Option<String>)> {
    let columns: Vec<(String,)> = sqlx::query_as(
        "SELECT column_name FROM information_schema.columns
         WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position",
    )
    .bind(store.table().as_str())
    .fetch_all(store.pool())
    .await
    .unwrap();
    let mut row = Vec::new();
    for (column,) in columns {
        let sql = format!(
            "SELECT CAST({column} AS CHAR) FROM {} WHERE event_id = ?",
            store.table().as_str()
        );
        let (value,): (Option<String>,) = sqlx::query_as(AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(store.pool())
            .await
            .unwrap();
        row.push((column, value));
    }
    row
}

/// MariaDB has no partial indexes, so every event of the direct mode has an entry in each of
/// inbox mode's indexes, written by its claim. A completion that changed a column one of them
/// is keyed on would move the event in each; keyed on `inbox_state` (NULL on the direct mode's
/// rows) instead of `state`, they are left as they are: the completion changes only the columns
/// of the direct mode's own indexes (`processed_at`, `expires_at`) among those indexed.
#[tokio::test]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_completion_of_the_direct_mode_moves_its_event_in_none_of_inbox_mode_s_indexes() {
    let test = mariadb_store("inboxkeys", 2).await;
    let store = &test.store;
    let id = unique_event_id("direct");
    let token = acquire(store, &id, LONG).await;
    let claimed = row_of(store, &id).await;
    assert_eq!(
        common::complete(store, &id, &token, LONG).await,
        Completion::Recorded
    );
    let completed = row_of(store, &id).await;
    let changed: Vec<&str> = claimed
        .iter()
        .zip(&completed)
        .filter(|(before, after)| before != after)
        .map(|((column, _), _)| column.as_str())
        .collect();
    assert!(
        changed.contains(&"state"),
        "the completion changed {changed:?}"
    );

    let own = [
        "PRIMARY".to_owned(),
        store.table().as_str().to_owned() + "_processed_at_idx",
        store.table().as_str().to_owned() + "_expires_at_idx",
    ];
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT index_name, column_name FROM information_schema.statistics
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(store.table().as_str())
    .fetch_all(store.pool())
    .await
    .unwrap();
    let inbox_keys: Vec<&(String, String)> = keys
        .iter()
        .filter(|(index, _)| !own.contains(index))
        .collect();
    assert_eq!(
        inbox_keys
            .iter()
            .map(|(index, _)| index)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        4,
        "inbox mode's four indexes: {keys:?}"
    );
    for (index, column) in inbox_keys {
        assert!(
            !changed.contains(&column.as_str()),
            "the completion of an event of the direct mode changed {column}, a key of {index}: \
             it moved the event in that index"
        );
    }
}

/// Takes the lock of `key`'s receipts on `store`'s table (named as `inbox_key_lock.sql` names
/// it) on a connection of the test's own, and answers that connection.
async fn hold_key_lock(store: &MariaDbStore, key: &str) -> MySqlConnection {
    let mut connection = MySqlConnection::connect(&common::mariadb_url())
        .await
        .unwrap();
    let (locked,): (i64,) = sqlx::query_as(
        "SELECT GET_LOCK(CONCAT('sangho_key_', SHA1(CONCAT(DATABASE(), CHAR(0), ?, CHAR(0), ?))), 5)",
    )
    .bind(store.table().as_str())
    .bind(key)
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!(locked, 1);
    connection
}

/// Whether a session holds the lock of `key`'s receipts on `store`'s table.
async fn key_lock_is_held(store: &MariaDbStore, key: &str) -> bool {
    let (held,): (i64,) = sqlx::query_as(
        "SELECT IS_USED_LOCK(CONCAT('sangho_key_', SHA1(CONCAT(DATABASE(), CHAR(0), ?, CHAR(0), ?))))
                IS NOT NULL",
    )
    .bind(store.table().as_str())
    .bind(key)
    .fetch_one(store.pool())
    .await
    .unwrap();
    held == 1
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_keyed_receipt_waits_for_its_keys_lock_at_most_the_lock_timeout() {
    let test_store = mariadb_store("keylock", 2).await;
    let store = test_store
        .store
        .clone()
        .with_lock_timeout(Duration::from_secs(1));
    let key = unique_event_id("key");
    let mut holder = hold_key_lock(&store, &key).await;

    let started = std::time::Instant::now();
    let refused = receive_with_key(&store, &unique_event_id("waits"), Some(&key)).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));
    let other = unique_event_id("other");
    let receipt = receive_with_key(&store, &other, Some(&unique_event_id("key"))).await;
    assert_eq!(receipt.unwrap(), Receipt::Stored, "other keys do not wait");
    assert_eq!(
        receive(&store, &unique_event_id("none")).await,
        Receipt::Stored
    );

    sqlx::query("DO RELEASE_ALL_LOCKS()")
        .execute(&mut holder)
        .await
        .unwrap();
    let stored = receive_with_key(&store, &unique_event_id("stored"), Some(&key)).await;
    assert_eq!(stored.unwrap(), Receipt::Stored);
    assert!(
        !key_lock_is_held(&store, &key).await,
        "released after the receipt"
    );
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_keyed_receipt_cancelled_while_it_waits_leaves_its_key_free() {
    let store = mariadb_store("keycancel", 1).await;
    let key = unique_event_id("key");
    let mut holder = hold_key_lock(&store, &key).await;
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        receive_with_key(&store, &unique_event_id("cancelled"), Some(&key)),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the receipt waits for the key: {cancelled:?}"
    );

    sqlx::query("DO RELEASE_ALL_LOCKS()")
        .execute(&mut holder)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while key_lock_is_held(&store, &key).await {
        assert!(
            std::time::Instant::now() < deadline,
            "the cancelled receipt's session keeps the key locked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored = receive_with_key(&store, &unique_event_id("stored"), Some(&key)).await;
    assert_eq!(stored.unwrap(), Receipt::Stored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn the_purges_users_run_never_delete_an_unfinished_inbox_event() {
    let test_store = mariadb_store("purges", 4).await;
    // Rows written by another tool count as completed for no time at all: any row the upgrade
    // gave an expiry would be purged at once.
    let store = test_store
        .store
        .clone()
        .with_adopted_retention(Duration::ZERO);
    let take = |lease| {
        let store = store.clone();
        async move {
            store
                .take(&ClaimToken::generate(), lease, Default::default())
                .await
                .unwrap()
                .expect("a due event")
        }
    };
    let received = unique_event_id("received");
    let lost = unique_event_id("lost");
    let retrying = unique_event_id("retrying");
    let dead = unique_event_id("dead");
    let completed = unique_event_id("completed");
    for id in [&lost, &retrying, &dead, &completed, &received] {
        assert_eq!(receive(&store, id).await, Receipt::Stored);
    }
    take(SHORT).await;
    let held = take(LONG).await;
    let later = FailedAttempt::new("status 500", NextAttempt::After(LONG));
    store.fail(&held.claimant(), &later).await.unwrap();
    let held = take(LONG).await;
    let out = FailedAttempt::new("status 500", NextAttempt::Dead);
    store.fail(&held.claimant(), &out).await.unwrap();
    let held = take(LONG).await;
    store.complete(&held.claimant(), SHORT).await.unwrap();
    tokio::time::sleep(PAST_SHORT).await;

    // An upgrade interrupted before its last index runs again on the next start.
    run(
        &store,
        &format!("DROP INDEX {}_queue_idx ON {{table}}", store.table()),
        &[],
    )
    .await;
    store.migrate().await.expect("migrate");

    store.purge(Duration::ZERO).await.expect("purge");
    run(&store, &store.cron_purge_sql(), &[]).await;
    run(
        &store,
        "DELETE FROM {table} WHERE processed_at < NOW() - INTERVAL 72 HOUR",
        &[],
    )
    .await;
    for kept in [&received, &lost, &retrying, &dead] {
        assert!(holds(&store, kept).await, "{kept} is kept");
    }
    assert!(
        !holds(&store, &completed).await,
        "the expired completion is purged"
    );
}

#[tokio::test]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn a_rolling_deploy_keeps_each_event_in_one_mode() {
    let store = mariadb_store("rolling", 4).await;
    // The direct mode acknowledges an inbox event as a duplicate: waiting, then in flight.
    let inboxed = unique_event_id("inboxed");
    let receipt = receive_with_key(&store, &inboxed, Some(&unique_event_id("key"))).await;
    assert_eq!(receipt.unwrap(), Receipt::Stored);
    assert_eq!(
        common::claim(&*store, &inboxed, LONG).await.unwrap(),
        Claim::Completed
    );
    let taken = store
        .take(&ClaimToken::generate(), LONG, Default::default())
        .await
        .unwrap()
        .expect("due");
    assert_eq!(
        common::claim(&*store, &inboxed, LONG).await.unwrap(),
        Claim::Completed
    );
    store.complete(&taken.claimant(), SHORT).await.unwrap();
    assert_eq!(
        common::claim(&*store, &inboxed, LONG).await.unwrap(),
        Claim::Completed
    );

    // An event a direct-mode delivery holds, then one it completed.
    let delivered = unique_event_id("delivered");
    let token = acquire(&*store, &delivered, LONG).await;
    assert_eq!(
        receive(&store, &delivered).await,
        Receipt::ClaimedByDelivery
    );
    common::complete(&*store, &delivered, &token, LONG).await;
    assert_eq!(receive(&store, &delivered).await, Receipt::Duplicate);

    // Past its retention, the inbox event is taken over by the direct mode, as a record of
    // that mode only.
    tokio::time::sleep(PAST_SHORT).await;
    acquire(&*store, &inboxed, LONG).await;
    assert_eq!(
        store.show(&inboxed).await.unwrap(),
        None,
        "no longer an inbox event"
    );
    let (count,): (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {} WHERE event_id = ? AND received_at IS NULL AND sequence IS NULL
           AND body IS NULL AND headers IS NULL AND request_path IS NULL AND due_at IS NULL
           AND last_error IS NULL AND history IS NULL AND replayed_at IS NULL AND attempts = 0
           AND replays = 0 AND ordering_key IS NULL AND state = 'in_flight'",
        store.table()
    )))
    .bind(&inboxed)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(count, 1, "the inbox columns are cleared");
}

/// The events logged while a store migrates on a private server started with `options`.
async fn logged_by_migrate_on_a_server_with(options: &[&str]) -> Vec<common::logs::Logged> {
    let server = common::private_mariadb::PrivateMariaDb::start(options);
    let (logs, _guard) = common::logs::Logs::capture();
    let store = MariaDbStore::connect(&server.url()).await.unwrap();
    store
        .migrate()
        .await
        .expect("the settings are logged, not refused");
    logs.matching("")
}

/// The errors of `logged`.
fn errors(logged: &[common::logs::Logged]) -> Vec<&common::logs::Logged> {
    logged
        .iter()
        .filter(|event| event.level == tracing::Level::ERROR)
        .collect()
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs MariaDB's server binaries (mariadb-install-db, mariadbd): run with --include-ignored"]
async fn migrate_logs_an_error_on_a_server_that_does_not_flush_each_commit() {
    let logged = logged_by_migrate_on_a_server_with(&["--innodb-flush-log-at-trx-commit=2"]).await;
    let errors = errors(&logged);
    assert_eq!(errors.len(), 1, "{logged:#?}");
    assert!(
        errors[0]
            .message
            .contains("innodb_flush_log_at_trx_commit is 2, not 1"),
        "{errors:#?}"
    );
    assert_eq!(errors[0].fields["innodb_flush_log_at_trx_commit"], "2");
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs MariaDB's server binaries (mariadb-install-db, mariadbd): run with --include-ignored"]
async fn migrate_logs_an_error_on_a_server_whose_binary_log_is_not_synced() {
    let logged = logged_by_migrate_on_a_server_with(&["--log-bin=binlog", "--sync-binlog=0"]).await;
    let errors = errors(&logged);
    assert_eq!(errors.len(), 1, "{logged:#?}");
    assert!(
        errors[0].message.contains("sync_binlog is 0, not 1"),
        "{errors:#?}"
    );
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs MariaDB's server binaries (mariadb-install-db, mariadbd): run with --include-ignored"]
async fn migrate_logs_no_error_on_a_server_that_flushes_each_commit() {
    let logged = logged_by_migrate_on_a_server_with(&["--log-bin=binlog", "--sync-binlog=1"]).await;
    assert!(errors(&logged).is_empty(), "{logged:#?}");
    let logged = logged_by_migrate_on_a_server_with(&[]).await;
    assert!(errors(&logged).is_empty(), "{logged:#?}");
}

/// Beside a million completed events (`SANGHO_GAUGES_ROWS`), the gauges read the index on
/// (inbox_state, due_at), never the completed rows (no step of their plan reads the whole table),
/// and a scrape takes under 10 ms (the median of 21).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
async fn beside_a_million_completed_events_a_scrape_of_the_gauges_takes_under_10_ms() {
    let rows = common::bodies::env_count("SANGHO_GAUGES_ROWS", 1_000_000);
    let test = mariadb_store("gauges", 4).await;
    let store = &test.store;
    run(
        store,
        &format!(
            "INSERT INTO {{table}} (event_id, event_type, state, claim_token, expires_at,
                                    received_at, sequence, body, due_at, attempts)
             SELECT CONCAT('evt_done_', seq), 'invoice.paid', 'completed', REPEAT('0', 32),
                    UTC_TIMESTAMP(6) + INTERVAL 72 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR,
                    seq, X'7b7d', NULL, 1
             FROM seq_1_to_{rows}"
        ),
        &[],
    )
    .await;
    run(store, "ANALYZE TABLE {table}", &[]).await;
    for _ in 0..3 {
        receive(store, &unique_event_id("gauges")).await;
    }

    let gauges = include_str!("../queries/mariadb/inbox_gauges.sql")
        .replace(
            "idx_webhook_lease_ends",
            &format!("{}_lease_ends_idx", store.table().as_str()),
        )
        .replace("{table}", store.table().as_str());
    let steps: Vec<(Option<String>, Option<String>)> =
        sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN {gauges}")))
            .fetch_all(store.pool())
            .await
            .expect("the gauges' plan")
            .iter()
            .map(|row| {
                use sqlx::Row as _;
                (row.get("table"), row.get("type"))
            })
            .collect();
    assert!(!steps.is_empty());
    for (table, read) in &steps {
        assert_ne!(
            read.as_deref(),
            Some("ALL"),
            "{table:?} read whole: {steps:?}"
        );
    }

    common::bodies::a_scrape_of_the_gauges_takes_under_10_ms(store, rows, 3).await;
}

/// The workers' takes and completions served in turns (`common/turns.rs`).
mod turns {
    use crate::common::{mariadb_store, turns};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn takes_served_together_never_take_two_events_of_one_key() {
        let store = mariadb_store("turn", 1).await;
        turns::takes_served_together_never_take_two_events_of_one_key(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn a_take_given_up_while_it_waits_for_its_turn_takes_nothing() {
        let store = mariadb_store("turngone", 1).await;
        turns::a_take_given_up_while_it_waits_for_its_turn_takes_nothing(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn completions_served_together_each_answer_for_their_own_token() {
        let store = mariadb_store("turncomplete", 1).await;
        turns::completions_served_together_each_answer_for_their_own_token(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn a_row_held_by_another_transaction_holds_up_no_other_completion_of_its_turn() {
        let store = mariadb_store("turnheld", 4).await;
        turns::a_row_held_by_another_transaction_holds_up_no_other_completion_of_its_turn(
            &store.store,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn a_lone_completion_of_a_held_row_holds_up_no_later_turn() {
        let store = mariadb_store("turnlone", 4).await;
        turns::a_lone_completion_of_a_held_row_holds_up_no_later_turn(&store.store).await;
    }
}
