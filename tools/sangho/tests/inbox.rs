//! `sangho inbox` through its binary, against SQLite and PostgreSQL: every command, and every
//! error case changes nothing and exits 1.
//!
//! The PostgreSQL tests are ignored by default: run them with `-- --include-ignored`, against
//! `SANGHO_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).

use std::{process::Output, time::Duration};

use sangho_webhook::{
    inbox::{EventState, FailedAttempt, Inbox, NextAttempt, ReceivedEvent},
    store::ClaimToken,
};
use sangho_webhook_sqlx::{PostgresStore, SqliteStore, sqlx};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(3600);

/// An inbox's table with one event in each state, and how to run the tool against it.
struct Seeded {
    url: String,
    table: String,
    inbox: Box<dyn Inbox>,
    received: String,
    in_flight: String,
    completed: String,
    dead: [String; 2],
    _cleanup: Box<dyn Send>,
}

fn unique(label: &str) -> String {
    format!("evt_{label}_{}", ClaimToken::generate())
}

async fn seed(inbox: &dyn Inbox) -> (String, String, String, [String; 2]) {
    let receive = |id: String| async move {
        let body = bytes::Bytes::from(format!(r#"{{"id":"{id}","type":"charge.failed"}}"#));
        let headers = [("content-type".to_owned(), "application/json".to_owned())];
        let event = ReceivedEvent::new(&id, "charge.failed", &body, &headers, "/webhooks/sangho");
        inbox.receive(&event).await.unwrap();
        id
    };
    let take = || async {
        inbox
            .take(&ClaimToken::generate(), LONG, Default::default())
            .await
            .unwrap()
            .unwrap()
    };
    let dead = [receive(unique("dead")).await, receive(unique("dead")).await];
    for _ in &dead {
        let taken = take().await;
        let attempt = FailedAttempt::new("status 500: upstream down", NextAttempt::Dead);
        inbox.fail(&taken.claimant(), &attempt).await.unwrap();
    }
    let completed = receive(unique("done")).await;
    let taken = take().await;
    inbox.complete(&taken.claimant(), LONG).await.unwrap();
    let in_flight = receive(unique("held")).await;
    take().await;
    let received = receive(unique("wait")).await;
    (received, in_flight, completed, dead)
}

async fn sqlite() -> Seeded {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("webhooks.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let (received, in_flight, completed, dead) = seed(&store).await;
    Seeded {
        url,
        table: "processed_webhook_events".to_owned(),
        inbox: Box::new(store),
        received,
        in_flight,
        completed,
        dead,
        _cleanup: Box::new(dir),
    }
}

fn postgres_url() -> String {
    std::env::var("SANGHO_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Drops the test's table when the test ends.
struct DropTable(String);

impl Drop for DropTable {
    fn drop(&mut self) {
        let table = std::mem::take(&mut self.0);
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let pool = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
                for sql in [
                    format!("DROP TABLE IF EXISTS {table}"),
                    format!("DROP SEQUENCE IF EXISTS {table}_sequence"),
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(&pool)
                        .await
                        .unwrap();
                }
            })
        })
        .join()
        .unwrap();
    }
}

async fn postgres() -> Seeded {
    let table = format!("sangho_tool_{}", ClaimToken::generate());
    let url = postgres_url();
    let store = PostgresStore::connect(&url)
        .await
        .unwrap()
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let (received, in_flight, completed, dead) = seed(&store).await;
    Seeded {
        url,
        table: table.clone(),
        inbox: Box::new(store),
        received,
        in_flight,
        completed,
        dead,
        _cleanup: Box::new(DropTable(table)),
    }
}

impl Seeded {
    /// Runs `sangho inbox <args>` with the store in `SANGHO_STORE_URL`.
    fn run(&self, args: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_sangho"))
            .arg("inbox")
            .args(["--table", &self.table])
            .args(args)
            .env("SANGHO_STORE_URL", &self.url)
            .output()
            .expect("run sangho")
    }

    /// Takes the seeded waiting event, so that the next take hands out an event received
    /// after the seeding.
    async fn take_the_waiting_event(&self) {
        let waiting = self
            .inbox
            .take(&ClaimToken::generate(), LONG, Default::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(waiting.event_id, self.received);
    }

    async fn state(&self, id: &str) -> Option<EventState> {
        self.inbox
            .show(id)
            .await
            .unwrap()
            .map(|record| record.summary.state)
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
}

async fn stats_json_counts_each_state(seeded: Seeded) {
    let output = seeded.run(&["stats", "--json"]);
    assert_exit(&output, 0);
    let stats: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(stats["received"], 1);
    assert_eq!(stats["in_flight"], 1);
    assert_eq!(stats["completed"], 1);
    assert_eq!(stats["dead"], 2);
    assert!(
        stats["oldest_waiting_seconds"].as_f64().unwrap() >= 0.0,
        "{stats}"
    );
    let keys: Vec<&str> = stats
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 5, "{keys:?}");
    let plain = seeded.run(&["stats"]);
    assert_exit(&plain, 0);
    assert!(
        stdout(&plain).contains("dead       2"),
        "{}",
        stdout(&plain)
    );
}

async fn list_filters_and_show_prints_one_event(seeded: Seeded) {
    let output = seeded.run(&["list", "--state", "dead", "--json"]);
    assert_exit(&output, 0);
    let ids: Vec<String> = stdout(&output)
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids, seeded.dead);
    let limited = seeded.run(&["list", "--limit", "2"]);
    assert_eq!(stdout(&limited).lines().count(), 2);
    let other_type = seeded.run(&["list", "--type", "invoice.paid"]);
    assert!(stdout(&other_type).contains("no event matches"));
    let future = seeded.run(&["list", "--since", "2999-01-01"]);
    assert!(stdout(&future).contains("no event matches"));

    let show = seeded.run(&["show", &seeded.dead[0], "--json"]);
    assert_exit(&show, 0);
    let record: Value = serde_json::from_str(stdout(&show).trim()).unwrap();
    assert_eq!(record["state"], "dead");
    assert_eq!(record["attempts"], 1);
    assert_eq!(record["last_error"], "status 500: upstream down");
    assert!(
        record["history"][0]
            .as_str()
            .unwrap()
            .contains("status 500: upstream down")
    );
    assert!(record["body"].as_str().unwrap().contains(&seeded.dead[0]));
    assert_eq!(record["headers"][0][0], "content-type");
    assert_eq!(record["path"], "/webhooks/sangho");
}

async fn replay_by_id_refuses_in_flight_and_completed_unless_forced(seeded: Seeded) {
    let replayed = seeded.run(&["replay", &seeded.dead[0]]);
    assert_exit(&replayed, 0);
    assert_eq!(
        seeded.state(&seeded.dead[0]).await,
        Some(EventState::Received)
    );

    let in_flight = seeded.run(&["replay", &seeded.in_flight]);
    assert_exit(&in_flight, 1);
    assert!(stderr(&in_flight).contains("processing it right now"));
    let completed = seeded.run(&["replay", &seeded.completed]);
    assert_exit(&completed, 1);
    assert!(stderr(&completed).contains("--force"));
    assert_eq!(
        seeded.state(&seeded.completed).await,
        Some(EventState::Completed)
    );
    let unreasoned = seeded.run(&["replay", &seeded.completed, "--force"]);
    assert_exit(&unreasoned, 2);
    let forced = seeded.run(&[
        "replay",
        &seeded.completed,
        "--force",
        "--reason",
        "INC-7 fix",
    ]);
    assert_exit(&forced, 0);
    assert!(stderr(&forced).contains("forced replay"));
    let record = seeded.inbox.show(&seeded.completed).await.unwrap().unwrap();
    assert_eq!(record.summary.state, EventState::Received);
    assert!(
        record.history.join("\n").contains("INC-7 fix"),
        "{:?}",
        record.history
    );

    let unknown = seeded.run(&["replay", &unique("unknown")]);
    assert_exit(&unknown, 1);
    assert!(stderr(&unknown).contains("unknown event"));
}

async fn replay_by_filter_changes_nothing_without_yes(seeded: Seeded) {
    let counted = seeded.run(&["replay", "--state", "dead"]);
    assert_exit(&counted, 0);
    assert!(
        stdout(&counted).contains("2 events match"),
        "{}",
        stdout(&counted)
    );
    let dry = seeded.run(&[
        "replay",
        "--state",
        "dead",
        "--type",
        "charge.failed",
        "--dry-run",
    ]);
    assert_exit(&dry, 0);
    assert!(stdout(&dry).contains(&format!("would replay {}", seeded.dead[1])));
    for id in &seeded.dead {
        assert_eq!(
            seeded.state(id).await,
            Some(EventState::Dead),
            "nothing changed"
        );
    }
    let done = seeded.run(&["replay", "--state", "dead", "--since", "1h", "--yes"]);
    assert_exit(&done, 0);
    for id in &seeded.dead {
        assert_eq!(seeded.state(id).await, Some(EventState::Received));
    }
}

async fn discard_by_filter_and_by_id(seeded: Seeded) {
    let counted = seeded.run(&["discard", "--state", "dead", "--before", "2999-01-01"]);
    assert_exit(&counted, 0);
    assert!(stdout(&counted).contains("2 events match"));
    assert_eq!(seeded.state(&seeded.dead[0]).await, Some(EventState::Dead));
    let done = seeded.run(&[
        "discard",
        "--state",
        "dead",
        "--before",
        "2999-01-01",
        "--yes",
    ]);
    assert_exit(&done, 0);
    assert_eq!(seeded.state(&seeded.dead[0]).await, None);
    let in_flight = seeded.run(&["discard", &seeded.in_flight]);
    assert_exit(&in_flight, 1);
    assert_eq!(
        seeded.state(&seeded.in_flight).await,
        Some(EventState::InFlight)
    );
    let by_id = seeded.run(&["discard", &seeded.received]);
    assert_exit(&by_id, 0);
    assert_eq!(seeded.state(&seeded.received).await, None);
}

/// Receives an event of `event_type` with the ordering key `key`, takes it and makes it dead.
async fn dead_event(inbox: &dyn Inbox, event_type: &str, key: &str) -> String {
    let id = unique("keyed");
    let body = bytes::Bytes::from(format!(r#"{{"id":"{id}","type":"{event_type}"}}"#));
    let event = ReceivedEvent::new(&id, event_type, &body, &[], "/webhooks/sangho")
        .with_ordering_key(Some(key));
    inbox.receive(&event).await.unwrap();
    let taken = inbox
        .take(&ClaimToken::generate(), LONG, Default::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.event_id, id, "the seeded inbox has nothing else due");
    let attempt = FailedAttempt::new("status 500", NextAttempt::Dead);
    inbox.fail(&taken.claimant(), &attempt).await.unwrap();
    id
}

async fn stats_by_type_counts_each_state_per_type(seeded: Seeded) {
    seeded.take_the_waiting_event().await;
    dead_event(&*seeded.inbox, "invoice.paid", "in_1").await;
    let output = seeded.run(&["stats", "--by-type", "--json"]);
    assert_exit(&output, 0);
    let rows: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let counts: Vec<(&str, u64, u64, u64, u64)> = rows
        .iter()
        .map(|row| {
            let count = |name: &str| row[name].as_u64().unwrap();
            let kind = row["type"].as_str().unwrap();
            (
                kind,
                count("received"),
                count("in_flight"),
                count("completed"),
                count("dead"),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [("charge.failed", 0, 2, 1, 2), ("invoice.paid", 0, 0, 0, 1)]
    );
    let plain = seeded.run(&["stats", "--by-type"]);
    assert_exit(&plain, 0);
    assert!(
        stdout(&plain).contains("invoice.paid"),
        "{}",
        stdout(&plain)
    );
}

async fn replay_by_key_replays_one_objects_events(seeded: Seeded) {
    seeded.take_the_waiting_event().await;
    let first = dead_event(&*seeded.inbox, "invoice.paid", "in_1").await;
    let other = dead_event(&*seeded.inbox, "invoice.paid", "in_2").await;
    let listed = seeded.run(&["list", "--key", "in_1", "--json"]);
    assert_exit(&listed, 0);
    let listed: Vec<Value> = stdout(&listed)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (&listed[0]["id"], &listed[0]["key"]),
        (&json!(first), &json!("in_1"))
    );

    let counted = seeded.run(&["replay", "--state", "dead", "--key", "in_1"]);
    assert_exit(&counted, 0);
    assert!(stdout(&counted).contains("1 event"), "{}", stdout(&counted));
    let done = seeded.run(&["replay", "--state", "dead", "--key", "in_1", "--yes"]);
    assert_exit(&done, 0);
    assert_eq!(seeded.state(&first).await, Some(EventState::Received));
    assert_eq!(seeded.state(&other).await, Some(EventState::Dead));
    assert_eq!(seeded.state(&seeded.dead[0]).await, Some(EventState::Dead));
}

async fn errors_exit_1_and_change_nothing(seeded: Seeded) {
    let unknown = seeded.run(&["show", &unique("unknown")]);
    assert_exit(&unknown, 1);
    assert!(stderr(&unknown).contains("unknown event"));
    let bad_since = seeded.run(&["replay", "--state", "dead", "--since", "yesterday", "--yes"]);
    assert_exit(&bad_since, 1);
    assert!(stderr(&bad_since).contains("bad time"));
    let bad_state = seeded.run(&["list", "--state", "zombie"]);
    assert_exit(&bad_state, 1);
    assert!(stderr(&bad_state).contains("unknown event state"));
    let no_state = seeded.run(&["replay", "--type", "charge.failed", "--yes"]);
    assert_exit(&no_state, 1);
    assert!(stderr(&no_state).contains("--state"));
    for id in &seeded.dead {
        assert_eq!(
            seeded.state(id).await,
            Some(EventState::Dead),
            "nothing changed"
        );
    }
    let no_table = std::process::Command::new(env!("CARGO_BIN_EXE_sangho"))
        .args(["inbox", "--table", "no_such_inbox", "stats"])
        .env("SANGHO_STORE_URL", &seeded.url)
        .output()
        .unwrap();
    assert_exit(&no_table, 1);
    assert!(
        stderr(&no_table).contains("has no inbox table no_such_inbox"),
        "{}",
        stderr(&no_table)
    );
}

async fn a_password_on_the_command_line_is_warned_about_and_never_printed(seeded: Seeded) {
    let Some(rest) = seeded.url.strip_prefix("postgres://postgres@") else {
        return;
    };
    let with_password = format!("postgres://postgres:hunter2@{rest}");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sangho"))
        .args([
            "inbox",
            "--table",
            &seeded.table,
            "--store",
            &with_password,
            "stats",
        ])
        .env_remove("SANGHO_STORE_URL")
        .output()
        .unwrap();
    assert_exit(&output, 0);
    assert!(
        stderr(&output).contains("carries a password"),
        "{}",
        stderr(&output)
    );
    assert!(!stderr(&output).contains("hunter2") && !stdout(&output).contains("hunter2"));
}

macro_rules! through_the_binary {
    ($backend:ident $(, #[$attribute:meta])*) => {
        mod $backend {
            macro_rules! case {
                ($name:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    $(#[$attribute])*
                    async fn $name() {
                        super::$name(super::$backend().await).await;
                    }
                };
            }
            case!(stats_json_counts_each_state);
            case!(list_filters_and_show_prints_one_event);
            case!(replay_by_id_refuses_in_flight_and_completed_unless_forced);
            case!(replay_by_filter_changes_nothing_without_yes);
            case!(discard_by_filter_and_by_id);
            case!(errors_exit_1_and_change_nothing);
            case!(stats_by_type_counts_each_state_per_type);
            case!(replay_by_key_replays_one_objects_events);
            case!(a_password_on_the_command_line_is_warned_about_and_never_printed);
        }
    };
}

through_the_binary!(sqlite);
through_the_binary!(
    postgres,
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
);
