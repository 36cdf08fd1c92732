//! `PostgresStore` against a real PostgreSQL server: the conformance suite and the behaviours
//! only a database shows (restarts, purge, an unreachable server, replicas sharing a table).
//!
//! Every test is ignored by default: run them with `cargo test -p sangho-webhook-sqlx --
//! --include-ignored`, against `SANGHO_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Each test works in a table of its own, dropped
//! when it ends.

mod common;

use std::{net::SocketAddr, str::FromStr, sync::Arc, time::Duration};

use axum::Router;
use common::{TYPE, bodies, layer, postgres_store, postgres_store_on, secret, to};
use http::StatusCode;
use http_body_util::BodyExt;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use sangho_webhook::{
    WebhookBody,
    store::{Claim, Claimant, Completion, Renewal, StoreError},
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures},
};
use sangho_webhook_sqlx::{
    PostgresStore,
    sqlx::{
        self, AssertSqlSafe,
        postgres::{PgConnectOptions, PgPoolOptions},
    },
};

sangho_webhook::idempotency_store_conformance!(
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    => async { postgres_store("conf", 16).await.under_test() }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn two_hundred_concurrent_claims_through_sixteen_connections_acquire_once() {
    let store = postgres_store("race", 16).await;
    let id = bodies::two_hundred_concurrent_claims_through_sixteen_connections_acquire_once(
        store.store.clone(),
    )
    .await;

    let rows: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT event_id, state FROM {}",
        store.table()
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(rows, vec![(id.to_string(), "in_flight".to_owned())]);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn completed_event_is_a_duplicate_after_the_pool_is_reopened() {
    let store = postgres_store("reopen", 4).await;
    bodies::completed_event_is_a_duplicate_after_the_pool_is_reopened(&store.store, || {
        postgres_store_on(store.table().as_str(), 4)
    })
    .await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn purge_removes_exactly_the_rows_past_their_own_expiry() {
    let store = postgres_store("purge", 4).await;
    bodies::purge_removes_exactly_the_rows_past_their_own_expiry(&store.store).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn purge_task_purges_until_stopped() {
    let store = postgres_store("task", 2).await;
    bodies::purge_task_purges_until_stopped(&store.store).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn migrate_adopts_a_table_of_the_provider_schema() {
    let table = bodies::table_named_after_the_default();
    let _guard = scopeguard(table.clone());
    let store = postgres_store_on(&table, 2).await;
    bodies::migrate_adopts_a_table_of_the_provider_schema(&store).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn migrate_refuses_a_table_without_the_event_columns() {
    let table = common::unique_table("refuse");
    let _guard = scopeguard(table.clone());
    let store = postgres_store_on(&table, 2).await;
    bodies::migrate_refuses_a_table_without_the_event_columns(&store).await;
}

/// Starts a transaction on a connection of its own that holds `lock` on `table` until the
/// answered connection is dropped.
async fn hold_lock(table: &str, lock: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut connection = sqlx::PgConnection::connect(&common::postgres_url())
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "BEGIN; LOCK TABLE {table} IN {lock} MODE"
    )))
    .execute(&mut connection)
    .await
    .unwrap();
    connection
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_migrated_table_named_after_the_default_is_not_altered_again() {
    let table = bodies::table_named_after_the_default();
    let _guard = scopeguard(table.clone());
    let store = postgres_store_on(&table, 2).await;
    store.migrate().await.unwrap();
    let (index,): (Option<String>,) = sqlx::query_as("SELECT to_regclass($1)::text")
        .bind(format!("{table}_processed_at_idx"))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(index, Some(format!("{table}_processed_at_idx")));
    // Traffic holds the table: a migration that altered it would have to wait.
    let traffic = hold_lock(&table, "ROW EXCLUSIVE").await;
    let migrated = tokio::time::timeout(Duration::from_secs(5), store.migrate()).await;
    // Release everything before asserting, so that a failure cannot hang the table's cleanup.
    drop(traffic);
    store.pool().close().await;
    migrated
        .expect("an up-to-date table is not altered: migrate takes no lock")
        .unwrap();
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn the_upgrade_of_a_table_a_transaction_holds_gives_up_after_30_s() {
    let table = common::unique_table("busy");
    let _guard = scopeguard(table.clone());
    let store = postgres_store_on(&table, 2).await;
    sqlx::raw_sql(AssertSqlSafe(
        <PostgresStore as bodies::TestDatabase>::provider_schema(&table),
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let traffic = hold_lock(&table, "ROW EXCLUSIVE").await;
    let started = std::time::Instant::now();
    // Each try waits 0.5 s for the table, then lets the traffic queued behind it go on for
    // 1 s; it gives up after 30 s.
    let upgraded = tokio::time::timeout(Duration::from_secs(45), store.migrate())
        .await
        .expect("the upgrade gives up instead of queueing every claim behind it");
    assert!(
        matches!(upgraded, Err(sangho_webhook_sqlx::Error::TableBusy { .. })),
        "the table stayed busy: {upgraded:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(28),
        "{:?}",
        started.elapsed()
    );
    drop(traffic);
    store
        .migrate()
        .await
        .expect("once the table is free, the upgrade runs");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn concurrent_migrations_all_succeed() {
    let table = common::unique_table("migr");
    let _guard = scopeguard(table.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let table = table.clone();
        tasks.spawn(async move {
            let store = postgres_store_on(&table, 1).await;
            store.migrate().await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap().expect("every replica migrates");
    }
}

/// Drops `table` when dropped.
fn scopeguard(table: String) -> impl Drop {
    struct Guard(String);
    impl Drop for Guard {
        fn drop(&mut self) {
            common::drop_table(std::mem::take(&mut self.0));
        }
    }
    Guard(table)
}

const LONG_LEASE: Duration = Duration::from_secs(3600);

/// Unreachable: nothing listens on port 1.
fn unreachable_store() -> PostgresStore {
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    PostgresStore::new(pool)
}

#[tokio::test]
async fn unreachable_database_is_a_store_error_within_the_acquire_timeout() {
    let error = bodies::claim_fails_within_the_acquire_timeout(&unreachable_store()).await;
    assert!(
        matches!(error, StoreError::Timeout(_) | StoreError::Backend(_)),
        "{error:?}"
    );
}

#[tokio::test]
async fn unreachable_database_gets_503_without_calling_the_handler() {
    bodies::unavailable_store_gets_503_without_calling_the_handler(unreachable_store()).await;
}

/// Serves `handler` behind a layer over its own `PostgresStore` (its own pool) on `table`.
async fn serve(table: &str, handler: CountingHandler) -> SocketAddr {
    let store = PostgresStore::connect(&common::postgres_url())
        .await
        .unwrap()
        .with_table_name(table)
        .unwrap();
    store.migrate().await.unwrap();
    let app = Router::new().route_service(
        "/webhooks/sangho",
        tower::Layer::layer(&layer(store), handler),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn two_servers_sharing_one_database_process_an_event_once() {
    let table = common::unique_table("servers");
    let _guard = scopeguard(table.clone());
    // One handler count across both servers; each server has its own layer and pool.
    let handler = CountingHandler::new().with_delay(Duration::from_millis(200));
    let servers = [
        serve(&table, handler.clone()).await,
        serve(&table, handler.clone()).await,
    ];
    let client = Client::builder(TokioExecutor::new()).build_http::<WebhookBody>();
    let id = unique_event_id("servers");
    let delivery = Delivery::event(&id, TYPE).signed(&secret(), fixtures::NOW);

    let barrier = Arc::new(tokio::sync::Barrier::new(40));
    let mut tasks = tokio::task::JoinSet::new();
    for attempt in 0..40 {
        let (client, barrier) = (client.clone(), barrier.clone());
        let request = to(servers[attempt % 2], delivery.clone().into_request());
        tasks.spawn(async move {
            barrier.wait().await;
            let response = client.request(request).await.expect("the server answers");
            let status = response.status();
            response.into_body().collect().await.expect("a body");
            status
        });
    }
    let mut statuses = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        statuses.push(joined.unwrap());
    }
    assert_eq!(
        handler.calls(),
        1,
        "exactly one server runs the handler, once"
    );
    assert!(
        statuses
            .iter()
            .all(|status| matches!(*status, StatusCode::OK | StatusCode::CONFLICT)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&StatusCode::OK));

    // Once completed, both servers answer a redelivery as a duplicate.
    for server in servers {
        let response = client
            .request(to(server, delivery.clone().into_request()))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(handler.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn claims_on_a_repeatable_read_pool_of_your_own_never_fail() {
    // The table, created over an ordinary pool; the store's own pool defaults every
    // transaction to REPEATABLE READ, and the store leaves its sessions alone.
    let table = postgres_store("rr", 1).await;
    let options = PgConnectOptions::from_str(&common::postgres_url())
        .unwrap()
        .options([("default_transaction_isolation", "repeatable read")]);
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .unwrap();
    let (isolation,): (String,) = sqlx::query_as("SHOW transaction_isolation")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(isolation, "repeatable read", "the session is left alone");
    let store = PostgresStore::new(pool).with_table(table.table().clone());
    // Several rounds: each is a race of 200 claims for one event through 16 connections.
    for _ in 0..3 {
        bodies::two_hundred_concurrent_claims_through_sixteen_connections_acquire_once(
            store.clone(),
        )
        .await;
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn connect_runs_its_connections_at_read_committed() {
    // A server whose sessions default to REPEATABLE READ (here through the URL's options).
    let url = format!(
        "{}?options=-c%20default_transaction_isolation%3Drepeatable%5C%20read",
        common::postgres_url()
    );
    let plain = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let (isolation,): (String,) = sqlx::query_as("SHOW transaction_isolation")
        .fetch_one(&plain)
        .await
        .unwrap();
    assert_eq!(isolation, "repeatable read");
    let store = PostgresStore::connect(&url).await.unwrap();
    let (isolation,): (String,) = sqlx::query_as("SHOW transaction_isolation")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(isolation, "read committed");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn purge_task_stops_promptly_while_its_purge_waits_for_a_lock() {
    let store = postgres_store("stop", 2).await;
    let table = store.table().as_str().to_owned();
    bodies::purge_task_stops_promptly_while_its_purge_waits_for_a_lock(&store.store, || {
        hold_lock(&table, "ACCESS EXCLUSIVE")
    })
    .await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn the_cron_purge_gives_the_same_answer_in_every_time_zone() {
    use sangho_webhook::store::IdempotencyStore;
    let store = postgres_store("zones", 2).await;
    let lasts = "payment_intent.succeeded";
    for zone in ["Pacific/Kiritimati", "UTC", "Pacific/Pago_Pago"] {
        // Completed 70 hours ago with a 72-hour retention: kept. Completed with its retention
        // run out: deleted.
        let kept = unique_event_id("kept");
        let token = common::acquire(&*store, &kept, Duration::from_secs(60)).await;
        assert_eq!(
            store
                .complete(
                    Claimant::new(&kept, lasts, &token),
                    Duration::from_secs(2 * 3600)
                )
                .await
                .unwrap(),
            Completion::Recorded
        );
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE {} SET processed_at = processed_at - INTERVAL '70 hours' WHERE event_id = $1",
            store.table()
        )))
        .bind(&kept)
        .execute(store.pool())
        .await
        .unwrap();
        let gone = unique_event_id("gone");
        let token = common::acquire(&*store, &gone, Duration::from_secs(60)).await;
        assert_eq!(
            store
                .complete(
                    Claimant::new(&gone, lasts, &token),
                    Duration::from_millis(1)
                )
                .await
                .unwrap(),
            Completion::Recorded
        );
        tokio::time::sleep(Duration::from_millis(20)).await;

        // The documented cron SQL, from a session in `zone`.
        let mut session = store.pool().acquire().await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SET TIME ZONE '{zone}'; {}",
            store.cron_purge_sql()
        )))
        .execute(&mut *session)
        .await
        .unwrap();
        sqlx::query("RESET TIME ZONE")
            .execute(&mut *session)
            .await
            .unwrap();
        drop(session);
        let ids = bodies::TestDatabase::event_ids(&store.store).await;
        assert!(
            ids.contains(&kept),
            "{zone}: a row within its retention is kept"
        );
        assert!(
            !ids.contains(&gone),
            "{zone}: a row past its retention is deleted"
        );
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn the_purge_gives_the_same_answer_on_a_pool_in_another_time_zone() {
    use sangho_webhook::store::IdempotencyStore;
    let table = postgres_store("zonepool", 1).await;
    let options = PgConnectOptions::from_str(&common::postgres_url())
        .unwrap()
        .options([("TimeZone", "Pacific/Kiritimati")]);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    let store = PostgresStore::new(pool).with_table(table.table().clone());
    // Processed 70 hours ago through a server whose sessions are in UTC, with a 72-hour
    // retention; purged from a replica whose sessions are at UTC+14.
    let kept = unique_event_id("kept");
    let token = common::acquire(&*table, &kept, Duration::from_secs(60)).await;
    assert_eq!(
        table
            .complete(
                Claimant::new(&kept, TYPE, &token),
                Duration::from_secs(2 * 3600)
            )
            .await
            .unwrap(),
        Completion::Recorded
    );
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {} SET processed_at = processed_at - INTERVAL '70 hours' WHERE event_id = $1",
        store.table()
    )))
    .bind(&kept)
    .execute(table.pool())
    .await
    .unwrap();
    assert_eq!(
        store.purge(Duration::from_secs(72 * 3600)).await.unwrap(),
        0
    );
    assert_eq!(
        common::claim(&store, &kept, LONG_LEASE).await.unwrap(),
        Claim::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn two_instances_sharing_one_database_run_the_handler_once_per_event() {
    let store = postgres_store("twoapps", 16).await;
    let second = postgres_store_on(store.table().as_str(), 16).await;
    bodies::two_instances_run_the_handler_once_per_event([store.store.clone(), second]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn purge_of_a_backlog_beside_32_claimers_fails_no_claim() {
    let store = postgres_store("backlog", 40).await;
    bodies::purge_of_a_backlog_beside_32_claimers_fails_no_claim(&store.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_handler_longer_than_the_lease_runs_once() {
    let store = postgres_store("slow", 4).await;
    bodies::a_handler_longer_than_the_lease_runs_once(store.store.clone()).await;
}

/// Another session's open transaction that holds the row of `id` in `table` (`SELECT … FOR
/// UPDATE`).
async fn lock_row(table: &str, id: &str) -> sqlx::PgConnection {
    use sqlx::{Connection, Executor};
    let mut other = sqlx::PgConnection::connect(&common::postgres_url())
        .await
        .unwrap();
    other.execute("BEGIN").await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT event_id FROM {table} WHERE event_id = $1 FOR UPDATE"
    )))
    .bind(id)
    .fetch_one(&mut other)
    .await
    .expect("lock the event's row");
    other
}

/// Ends the transaction of [`lock_row`].
async fn unlock_row(mut other: sqlx::PgConnection) {
    use sqlx::{Connection, Executor};
    other.execute("COMMIT").await.unwrap();
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_claim_that_waits_on_a_row_lock_never_lands_after_its_503() {
    let store = postgres_store("rowlock", 1).await;
    let table = store.table().as_str().to_owned();
    let id = unique_event_id("rowlock");
    bodies::a_claim_that_waits_on_a_lock_never_lands_after_its_503(
        store.store.clone(),
        &id,
        (|| lock_row(&table, &id), unlock_row),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn a_renewal_that_waits_on_a_row_lock_gives_up_after_the_lock_timeout() {
    let store = postgres_store("renewlock", 2).await;
    let table = store.table().as_str().to_owned();
    let id = unique_event_id("renewlock");
    bodies::a_renewal_that_waits_on_a_lock_gives_up_after_the_lock_timeout(
        store.store.clone(),
        &id,
        (|| lock_row(&table, &id), unlock_row),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn claims_and_renewals_leave_the_session_lock_timeout_as_it_is() {
    use sangho_webhook::store::IdempotencyStore as _;
    let store = postgres_store("session", 1).await;
    let id = unique_event_id("session");
    let token = common::acquire(&*store, &id, common::LONG).await;
    assert_eq!(
        store
            .renew(Claimant::new(&id, TYPE, &token), common::LONG)
            .await
            .unwrap(),
        Renewal::Held
    );
    let (lock_timeout,): (String,) = sqlx::query_as("SHOW lock_timeout")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(
        lock_timeout, "0",
        "the session's own setting (the server's default)"
    );
}
