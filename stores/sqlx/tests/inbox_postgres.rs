//! Inbox mode on PostgreSQL: the inbox conformance suite, each check in a table of its own.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx -- --include-ignored`,
//! against `SANGHO_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).

mod common;

use common::postgres_store;

sangho_webhook::inbox_conformance!(
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    => async { postgres_store("inbox", 16).await.inbox_under_test() }
);

mod upgrade_purge_and_rolling_deploy {
    //! The table's life across releases and modes: a table of the previous release upgraded in
    //! place with rows in it, the purges users already run against an inbox, and the direct
    //! mode and inbox mode serving one table at once.

    use std::{
        collections::HashMap,
        sync::{Arc, Mutex},
        time::{Duration, Instant},
    };

    use sangho_webhook::{
        SanghoEvent, SanghoWebhookLayer, WebhookBody,
        inbox::{
            EventState, FailedAttempt, Inbox, InboxReceiver, InboxWorker, NextAttempt, Receipt,
        },
        store::{Claim, ClaimToken, Claimant, IdempotencyStore},
        testing::{Delivery, conformance::unique_event_id, fixtures, send},
    };
    use sangho_webhook_sqlx::{
        PostgresStore,
        sqlx::{self, AssertSqlSafe},
    };

    use crate::common::{TYPE, postgres_store, postgres_store_on};

    const LONG: Duration = Duration::from_secs(3600);

    fn delivery(id: &str) -> http::Request<WebhookBody> {
        Delivery::event(id, TYPE)
            .signed(&fixtures::secret(), fixtures::NOW)
            .into_request()
    }

    async fn run(store: &PostgresStore, sql: &str) -> u64 {
        let sql = sql
            .replace("processed_webhook_events", store.table().as_str())
            .replace("{table}", store.table().as_str());
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(store.pool())
            .await
            .unwrap()
            .rows_affected()
    }

    async fn receive(store: &PostgresStore, id: &str) -> Receipt {
        let body = bytes::Bytes::from(fixtures::event_body(id, TYPE));
        let headers = [("content-type".to_owned(), "application/json".to_owned())];
        let event = sangho_webhook::inbox::ReceivedEvent::new(
            id,
            TYPE,
            &body,
            &headers,
            "/webhooks/sangho",
        );
        store.receive(&event).await.unwrap()
    }

    async fn claim(store: &PostgresStore, id: &str) -> Claim {
        let token = ClaimToken::generate();
        store
            .claim(Claimant::new(id, TYPE, &token), LONG)
            .await
            .unwrap()
    }

    async fn state(store: &PostgresStore, id: &str) -> Option<EventState> {
        store
            .show(id)
            .await
            .unwrap()
            .map(|record| record.summary.state)
    }

    #[tokio::test]
    #[ignore = "needs PostgreSQL: run with --include-ignored"]
    async fn a_table_of_the_previous_release_is_upgraded_in_place_with_its_rows() {
        let table = crate::common::unique_table("prev");
        let store = postgres_store_on(&table, 4).await;
        let _drop = DropTable(table.clone());
        run(&store, include_str!("fixtures/previous/postgres.sql")).await;
        // Rows the previous release wrote: a completed event, a live claim of a delivery.
        let (done, held) = (unique_event_id("done"), unique_event_id("held"));
        let rows = format!(
            "INSERT INTO processed_webhook_events (event_id, event_type, state, claim_token, expires_at) VALUES \
             ('{done}', '{TYPE}', 'completed', '{token}', now() + INTERVAL '1 hour'), \
             ('{held}', '{TYPE}', 'in_flight', '{token}', now() + INTERVAL '1 hour')",
            token = ClaimToken::generate()
        );
        run(&store, &rows).await;

        store.migrate().await.expect("upgraded");
        store.migrate().await.expect("migrate runs again");

        assert_eq!(
            claim(&store, &done).await,
            Claim::Completed,
            "still a duplicate"
        );
        assert_eq!(claim(&store, &held).await, Claim::InFlight, "still held");
        assert_eq!(receive(&store, &done).await, Receipt::Duplicate);
        assert_eq!(receive(&store, &held).await, Receipt::ClaimedByDelivery);
        let new = unique_event_id("new");
        assert_eq!(receive(&store, &new).await, Receipt::Stored);
        assert_eq!(
            claim(&store, &new).await,
            Claim::Completed,
            "the direct mode acknowledges an inbox event as a duplicate"
        );
        let taken = store
            .take(&ClaimToken::generate(), LONG, Default::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken.event_id, new);
    }

    #[tokio::test]
    #[ignore = "needs PostgreSQL: run with --include-ignored"]
    async fn the_purges_users_already_run_never_delete_an_unfinished_event() {
        let test = postgres_store("purges", 4).await;
        let store = &test.store;
        let (waiting, lost, retrying, dead, done) = (
            unique_event_id("waiting"),
            unique_event_id("lost"),
            unique_event_id("retrying"),
            unique_event_id("dead"),
            unique_event_id("done"),
        );
        for id in [&lost, &retrying, &dead, &done, &waiting] {
            receive(store, id).await;
        }
        let take = || async {
            store
                .take(&ClaimToken::generate(), LONG, Default::default())
                .await
                .unwrap()
                .unwrap()
        };
        take().await; // lost: its lease is set to run out below
        let held = take().await;
        store
            .fail(
                &held.claimant(),
                &FailedAttempt::new("x", NextAttempt::After(LONG)),
            )
            .await
            .unwrap();
        let held = take().await;
        store
            .fail(
                &held.claimant(),
                &FailedAttempt::new("x", NextAttempt::Dead),
            )
            .await
            .unwrap();
        let held = take().await;
        Inbox::complete(store, &held.claimant(), LONG)
            .await
            .unwrap();
        // The migration script run again by hand (a migration tool re-running it).
        let script = store.schema();
        let (in_a_transaction, _) = script.split_once("-- Outside a transaction").unwrap();
        run(store, in_a_transaction).await;
        // Everything four days old: the lost lease ran out long ago, the completion's retention too.
        let age = format!(
            "UPDATE {} SET received_at = received_at - INTERVAL '4 days', \
             due_at = due_at - INTERVAL '4 days', expires_at = expires_at - INTERVAL '4 days', \
             processed_at = processed_at - INTERVAL '4 days'",
            store.table()
        );
        sqlx::query(AssertSqlSafe(age))
            .execute(store.pool())
            .await
            .unwrap();

        let provider =
            "DELETE FROM processed_webhook_events WHERE processed_at < NOW() - INTERVAL '72 hours'";
        let previous_cron = include_str!("fixtures/previous/postgres_cron_purge.sql");
        let purges = [
            provider.to_owned(),
            previous_cron.to_owned(),
            store.cron_purge_sql(),
        ];
        for purge in &purges {
            run(store, purge).await;
            for id in [&waiting, &lost, &retrying, &dead] {
                assert!(state(store, id).await.is_some(), "{id} deleted by {purge}");
            }
        }
        store.purge(LONG).await.unwrap();
        for id in [&waiting, &lost, &retrying, &dead] {
            assert!(
                state(store, id).await.is_some(),
                "{id} deleted by the store's purge"
            );
        }
        let exists = format!("SELECT count(*) FROM {} WHERE event_id = $1", store.table());
        let left: i64 = sqlx::query_scalar(AssertSqlSafe(exists))
            .bind(&done)
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(left, 0, "the expired completion is purged");
    }

    /// Both modes on one table at once, as in a rolling deploy (either direction): each of 60
    /// events is delivered to a direct-mode server and to an inbox-mode server, concurrently
    /// and in both orders, and redelivered until both have acknowledged it; the inbox's workers
    /// run meanwhile. Every event is handled exactly once, by one mode or the other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs PostgreSQL: run with --include-ignored"]
    async fn both_modes_on_one_table_handle_each_event_once() {
        let test = postgres_store("rolling", 16).await;
        let store = test.store.clone();
        let handled: Arc<Mutex<HashMap<String, Vec<&'static str>>>> = Arc::default();
        let handler = |mode: &'static str| {
            let handled = handled.clone();
            tower::service_fn(move |request: http::Request<WebhookBody>| {
                let id = request
                    .extensions()
                    .get::<SanghoEvent>()
                    .unwrap()
                    .id()
                    .to_owned();
                handled.lock().unwrap().entry(id).or_default().push(mode);
                async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        WebhookBody::from_static(b"ok"),
                    ))
                }
            })
        };
        let direct = tower::Layer::layer(
            &SanghoWebhookLayer::builder(fixtures::secret(), store.clone())
                .with_clock(fixtures::fixed_clock)
                .build()
                .unwrap(),
            handler("direct"),
        );
        let inbox = InboxReceiver::builder(fixtures::secret(), store.clone())
            .with_clock(fixtures::fixed_clock)
            .build()
            .unwrap();
        let workers = InboxWorker::builder(store.clone(), handler("inbox"))
            .build()
            .unwrap()
            .start();

        let ids: Vec<String> = (0..60).map(|_| unique_event_id("rolling")).collect();
        // Local tasks: the services' futures are not `Send` for every lifetime.
        let local = tokio::task::LocalSet::new();
        let mut deliveries = tokio::task::JoinSet::new();
        for (n, id) in ids.iter().cloned().enumerate() {
            let (direct, inbox) = (direct.clone(), inbox.clone());
            deliveries.spawn_local_on(
                async move {
                    // Half the events reach the direct mode first, half the inbox.
                    let (mut to_direct, mut to_inbox) = if n % 2 == 0 {
                        tokio::join!(send(&direct, delivery(&id)), send(&inbox, delivery(&id)))
                    } else {
                        let (to_inbox, to_direct) =
                            tokio::join!(send(&inbox, delivery(&id)), send(&direct, delivery(&id)));
                        (to_direct, to_inbox)
                    };
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while !(to_direct.status.is_success() && to_inbox.status.is_success()) {
                        assert!(Instant::now() < deadline, "{id} never acknowledged by both");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if !to_direct.status.is_success() {
                            to_direct = send(&direct, delivery(&id)).await;
                        }
                        if !to_inbox.status.is_success() {
                            to_inbox = send(&inbox, delivery(&id)).await;
                        }
                    }
                },
                &local,
            );
        }
        local.run_until(deliveries.join_all()).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let done = ids
                .iter()
                .all(|id| handled.lock().unwrap().contains_key(id));
            let stats = store.stats().await.unwrap();
            if done && stats.received == 0 && stats.in_flight == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "not all handled: {stats:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(workers.shutdown(Duration::from_secs(10)).await);
        let handled = handled.lock().unwrap();
        let modes: Vec<&'static str> = handled.values().flatten().copied().collect();
        for id in &ids {
            assert_eq!(handled[id].len(), 1, "{id} handled by {:?}", handled[id]);
        }
        eprintln!(
            "60 events delivered to both modes: {} handled by the direct mode, {} by the inbox, each once",
            modes.iter().filter(|mode| **mode == "direct").count(),
            modes.iter().filter(|mode| **mode == "inbox").count()
        );
    }

    struct DropTable(String);

    impl Drop for DropTable {
        fn drop(&mut self) {
            crate::common::drop_table(self.0.clone());
        }
    }
}

mod gauges_and_takes_read_their_indexes {
    //! Beside a million completed events (`SANGHO_GAUGES_ROWS`), the gauges a metrics scrape
    //! reads and a worker's take read inbox mode's partial indexes, never the completed rows:
    //! their plans hold no sequential scan of the table, and a scrape of the gauges takes
    //! under 10 ms.

    use std::time::Duration;

    use sangho_webhook::{
        inbox::{Inbox, ReceivedEvent, TakeOrder},
        store::{ClaimToken, Completion},
        testing::{conformance::unique_event_id, fixtures},
    };
    use sangho_webhook_sqlx::{
        GroupCommit,
        sqlx::{self, AssertSqlSafe},
    };

    use crate::common::postgres_store;

    /// The plan of `sql` (the store's statement, its parameters bound to `binds`).
    async fn plan(pool: &sqlx::PgPool, sql: &str, binds: &str) -> String {
        let prepare = format!("PREPARE sangho_plan AS {sql}");
        let mut connection = pool.acquire().await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(prepare))
            .execute(&mut *connection)
            .await
            .unwrap();
        // A generic plan: what a prepared statement of the store settles on.
        sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
            .execute(&mut *connection)
            .await
            .unwrap();
        let explain = format!("EXPLAIN EXECUTE sangho_plan{binds}");
        let lines: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(explain))
            .fetch_all(&mut *connection)
            .await
            .unwrap();
        sqlx::raw_sql("DEALLOCATE sangho_plan; RESET plan_cache_mode")
            .execute(&mut *connection)
            .await
            .unwrap();
        lines
            .into_iter()
            .map(|(line,)| line)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn beside_a_million_completed_events_the_gauges_and_the_take_read_indexes() {
        let rows: u64 = std::env::var("SANGHO_GAUGES_ROWS")
            .ok()
            .and_then(|rows| rows.parse().ok())
            .unwrap_or(1_000_000);
        let store = postgres_store("gauges", 4).await;
        let table = store.store.table().as_str().to_owned();
        crate::common::postgres_completed_rows(store.store.pool(), &table, rows).await;
        let analyze = format!("ANALYZE {table}");
        sqlx::raw_sql(AssertSqlSafe(analyze))
            .execute(store.store.pool())
            .await
            .unwrap();
        let body = bytes::Bytes::from_static(b"{}");
        for _ in 0..3 {
            let id = unique_event_id("gauges");
            let event = ReceivedEvent::new(&id, fixtures::EVENT_TYPE, &body, &[], "/")
                .with_ordering_key(Some("in_1"));
            store.store.receive(&event).await.unwrap();
        }

        let sql_of = |file: &str| file.replace("{table}", &table);
        let gauges = plan(
            store.store.pool(),
            &sql_of(include_str!("../queries/postgres/inbox_gauges.sql")),
            "",
        )
        .await;
        let take = plan(
            store.store.pool(),
            &sql_of(include_str!("../queries/postgres/inbox_take_many.sql")),
            "(ARRAY['00000000000000000000000000000000', '00000000000000000000000000000001'], \
             30000000, 1)",
        )
        .await;
        for (what, plan) in [("gauges", &gauges), ("take", &take)] {
            assert!(
                !plan.contains(&format!("Seq Scan on {table}")),
                "the {what} scan the table:\n{plan}"
            );
        }

        crate::common::bodies::a_scrape_of_the_gauges_takes_under_10_ms(&store.store, rows, 3)
            .await;
    }

    /// Receives an event, takes it and completes it: a turn of takes and a turn of
    /// completions, each of one.
    async fn receive_take_complete(store: &impl Inbox) {
        let body = bytes::Bytes::from_static(b"{}");
        let id = unique_event_id("grow");
        let event = ReceivedEvent::new(&id, fixtures::EVENT_TYPE, &body, &[], "/");
        store.receive(&event).await.unwrap();
        let token = ClaimToken::generate();
        let taken = store
            .take(&token, Duration::from_secs(60), TakeOrder::FreshFirst)
            .await
            .unwrap()
            .expect("the event just received is due");
        let completed = store
            .complete(&taken.claimant(), Duration::from_secs(3600))
            .await;
        assert_eq!(completed.unwrap(), Completion::Recorded);
    }

    /// A table that grew after the workers' turns settled on a plan, while it was nearly
    /// empty (a new table, before autovacuum analyzes it): within 100 turns the takes and
    /// completions read it by its indexes again, and no turn scans it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn the_turns_read_a_table_that_grew_by_its_indexes() {
        // One connection for each turn's queue, one for the receipts, which are not grouped:
        // the turns keep the same two connections throughout.
        let connections = 3;
        let mut store = postgres_store("grown", connections).await;
        store.store = store.store.clone().with_group_commit(GroupCommit::OFF);
        let table = store.store.table().as_str().to_owned();
        // Past the five runs after which a prepared statement keeps a generic plan.
        let scans = crate::common::postgres_scans_once_grown(
            store.store.pool(),
            connections,
            &table,
            8,
            || receive_take_complete(&store.store),
        )
        .await;
        assert_eq!(
            scans, 0,
            "16 turns of takes and of completions scanned the table {scans} times"
        );
    }
}

/// The workers' takes and completions served in turns (`common/turns.rs`).
mod turns {
    use crate::common::{postgres_store, turns};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn takes_served_together_never_take_two_events_of_one_key() {
        let store = postgres_store("turn", 1).await;
        turns::takes_served_together_never_take_two_events_of_one_key(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn a_take_given_up_while_it_waits_for_its_turn_takes_nothing() {
        let store = postgres_store("turngone", 1).await;
        turns::a_take_given_up_while_it_waits_for_its_turn_takes_nothing(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn completions_served_together_each_answer_for_their_own_token() {
        let store = postgres_store("turncomplete", 1).await;
        turns::completions_served_together_each_answer_for_their_own_token(&store.store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn a_row_held_by_another_transaction_holds_up_no_other_completion_of_its_turn() {
        let store = postgres_store("turnheld", 4).await;
        turns::a_row_held_by_another_transaction_holds_up_no_other_completion_of_its_turn(
            &store.store,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn a_lone_completion_of_a_held_row_holds_up_no_later_turn() {
        let store = postgres_store("turnlone", 4).await;
        turns::a_lone_completion_of_a_held_row_holds_up_no_later_turn(&store.store).await;
    }
}

mod lock_waits {
    //! A receipt that waits for a row another transaction holds (a handler's own, still open)
    //! gives up after the store's lock timeout, as a claim does.

    use std::time::{Duration, Instant};

    use crate::common::{TYPE, postgres_row_held, postgres_store};
    use bytes::Bytes;
    use sangho_webhook::{
        inbox::{Inbox, Receipt, ReceivedEvent},
        testing::conformance::unique_event_id,
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn a_redelivery_that_waits_on_a_row_lock_gives_up_after_the_lock_timeout() {
        let test_store = postgres_store("receivelock", 2).await;
        let store = test_store
            .store
            .clone()
            .with_lock_timeout(Duration::from_millis(500));
        let id = unique_event_id("receivelock");
        let body = Bytes::from_static(b"{}");
        let event = ReceivedEvent::new(&id, TYPE, &body, &[], "/webhooks");
        assert_eq!(store.receive(&event).await.unwrap(), Receipt::Stored);
        let handler = postgres_row_held(&store, &id).await;

        let started = Instant::now();
        let redelivery = tokio::time::timeout(Duration::from_secs(5), store.receive(&event)).await;
        let waited = started.elapsed();
        let redelivery = redelivery.expect("the redelivery gives up on its own");
        assert!(redelivery.is_err(), "{redelivery:?} after {waited:?}");
        assert!(waited >= Duration::from_millis(500), "it waited {waited:?}");

        handler.rollback().await.unwrap();
        assert_eq!(store.receive(&event).await.unwrap(), Receipt::Duplicate);
    }
}
