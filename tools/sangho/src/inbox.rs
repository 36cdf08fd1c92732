//! `sangho inbox`: the operations on an inbox's table, for an operator: what waits, what
//! failed, and replaying or discarding events by hand.
//!
//! ```sh
//! export SANGHO_STORE_URL=postgres://app@db/app          # or sqlite://webhooks.db, mysql://…
//! cargo run -p sangho-tools -- inbox stats                # events per state, oldest waiting
//! cargo run -p sangho-tools -- inbox stats --by-type      # the same for each event type
//! cargo run -p sangho-tools -- inbox list --state dead --type charge.failed --since 2d
//! cargo run -p sangho-tools -- inbox show evt_123        # attempts, history, headers, body
//! cargo run -p sangho-tools -- inbox replay evt_123      # due now, with a fresh attempt budget
//! cargo run -p sangho-tools -- inbox replay --state dead --since 1d --yes
//! cargo run -p sangho-tools -- inbox replay --state dead --key in_1Nq --yes  # one object's
//! cargo run -p sangho-tools -- inbox discard --state dead --before 30d --yes
//! ```
//!
//! The store comes from `SANGHO_STORE_URL`; `--store URL` works too, but a URL on the command
//! line is visible to every user of the machine, so the tool warns when it carries a password
//! (and never prints one). `--table` defaults to the store's table, `processed_webhook_events`.
//! The tool never creates a database or a table and never migrates: a database without the
//! inbox's table is an error. The read-only commands (`stats`, `list`, `show`) open the
//! database read-only.
//!
//! A replay or a discard by filter prints how many events match and changes nothing without
//! `--yes`; `--dry-run` lists them. A replay makes an event due now with a fresh attempt
//! budget and keeps its history; an event in flight is refused, and a completed one unless
//! `--force` with a `--reason`, which goes into its history. Times (`--since`, `--before`) are
//! an age (`90s`, `30m`, `2h`, `7d`) or a UTC date or time (`2026-12-01`,
//! `2026-12-01T08:00:00Z`). Every error (an unknown id, a refused replay, a bad filter, a
//! database without the table) exits 1 with a message, and changes nothing.

use std::{
    error::Error,
    process::ExitCode,
    str::FromStr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use clap::{Args as ClapArgs, Subcommand};
use sangho_examples_support::loggable_url;
use sangho_webhook::inbox::{
    Discarded, EventRecord, EventState, EventSummary, Filter, Inbox, InboxStats, Replay, Replayed,
    rfc3339,
};
use sangho_webhook_sqlx::{
    MariaDbStore, PostgresStore, SqliteStore, TableName,
    sqlx::{
        ConnectOptions,
        mysql::{MySqlConnectOptions, MySqlPoolOptions},
        postgres::{PgConnectOptions, PgPoolOptions},
        sqlite::{SqliteConnectOptions, SqlitePoolOptions},
    },
};
use serde_json::{Value, json};

type BoxError = Box<dyn Error + Send + Sync>;

/// How many events `list` shows unless `--limit` says otherwise.
pub const DEFAULT_LIMIT: u32 = 50;

/// `sangho inbox`'s options.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The store (`postgres://…`, `sqlite://FILE`, `mysql://…`); prefer `SANGHO_STORE_URL`.
    #[arg(long, env = "SANGHO_STORE_URL", hide_env_values = true)]
    store: String,
    /// The inbox's table.
    #[arg(long, default_value = TableName::DEFAULT)]
    table: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Events per state, and how long the oldest waiting event has waited
    Stats {
        /// One JSON object: received, in_flight, completed, dead, oldest_waiting_seconds
        /// (with --by-type, one object per type, with its `type`).
        #[arg(long)]
        json: bool,
        /// The same for each event type.
        #[arg(long)]
        by_type: bool,
    },
    /// The events a filter selects, received first first
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// At most this many.
        #[arg(long, default_value_t = DEFAULT_LIMIT)]
        limit: u32,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// One event: its attempts, last error, history, headers and body
    Show {
        /// The event's id.
        id: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Makes events due now with a fresh attempt budget
    Replay {
        /// The events' ids (or a filter instead).
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        confirm: Confirm,
        /// Replays completed events too (they are processed again); needs --reason.
        #[arg(long, requires = "reason")]
        force: bool,
        /// Why, recorded in each event's history.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deletes events by hand (personal data); never one in flight
    Discard {
        /// The events' ids (or a filter instead).
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        confirm: Confirm,
    },
}

#[derive(Debug, ClapArgs)]
struct FilterArgs {
    /// Only events in this state: received, in_flight, completed or dead.
    #[arg(long)]
    state: Option<String>,
    /// Only events of this type.
    #[arg(long = "type")]
    event_type: Option<String>,
    /// Only events received at or after this time (an age such as 2h, or a UTC date).
    #[arg(long)]
    since: Option<String>,
    /// Only events received before this time (an age such as 30d, or a UTC date).
    #[arg(long)]
    before: Option<String>,
    /// Only events of this ordering key (an object's id, when the receiver keys events by
    /// object).
    #[arg(long)]
    key: Option<String>,
}

#[derive(Debug, ClapArgs)]
struct Confirm {
    /// Changes the events a filter selects (without it, only their count is printed).
    #[arg(long, conflicts_with = "dry_run")]
    yes: bool,
    /// Lists the events a filter selects, and changes nothing.
    #[arg(long)]
    dry_run: bool,
}

impl FilterArgs {
    fn is_empty(&self) -> bool {
        self.state.is_none()
            && self.event_type.is_none()
            && self.since.is_none()
            && self.before.is_none()
            && self.key.is_none()
    }

    fn filter(&self, now: SystemTime) -> Result<Filter, BoxError> {
        let mut filter = Filter::new();
        if let Some(state) = &self.state {
            filter = filter.with_state(state.parse::<EventState>()?);
        }
        if let Some(event_type) = &self.event_type {
            filter = filter.with_event_type(event_type);
        }
        if let Some(since) = &self.since {
            filter = filter.with_since(parse_time(since, now)?);
        }
        if let Some(before) = &self.before {
            filter = filter.with_before(parse_time(before, now)?);
        }
        if let Some(key) = &self.key {
            filter = filter.with_ordering_key(key);
        }
        Ok(filter)
    }
}

/// Runs `sangho inbox …`: 0 when it did what it was asked, 1 otherwise (with a message).
pub async fn command(args: Args) -> ExitCode {
    match run(args).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<ExitCode, BoxError> {
    if std::env::var("SANGHO_STORE_URL").ok().as_deref() != Some(&args.store)
        && has_password(&args.store)
    {
        eprintln!(
            "warning: the --store URL ({}) carries a password, which every user of this machine \
             can read in the process list: set SANGHO_STORE_URL instead",
            loggable_url(&args.store)
        );
    }
    let table = TableName::new(&args.table)?;
    let read_only = matches!(
        args.command,
        Command::Stats { .. } | Command::List { .. } | Command::Show { .. }
    );
    let inbox = open(&args.store, table.clone(), read_only).await?;
    // Nothing is created: a database without the inbox's table is an error, before anything.
    inbox
        .count(&Filter::new().with_limit(1))
        .await
        .map_err(|error| explain(&chain(&error), &table, &args.store))?;
    let now = SystemTime::now();
    match args.command {
        Command::Stats {
            json,
            by_type: false,
        } => stats(&*inbox, json).await,
        Command::Stats {
            json,
            by_type: true,
        } => stats_by_type(&*inbox, json).await,
        Command::List {
            filter,
            limit,
            json,
        } => list(&*inbox, filter.filter(now)?.with_limit(limit), json).await,
        Command::Show { id, json } => show(&*inbox, &id, json).await,
        Command::Replay {
            ids,
            filter,
            confirm,
            force,
            reason,
        } => {
            let mut replay = Replay::new().with_force(force);
            if let Some(reason) = reason {
                replay = replay.with_reason(reason);
            }
            let selection = Selection::of(ids, &filter, now)?;
            replay_events(&*inbox, selection, &confirm, &replay).await
        }
        Command::Discard {
            ids,
            filter,
            confirm,
        } => {
            let selection = Selection::of(ids, &filter, now)?;
            discard_events(&*inbox, selection, &confirm).await
        }
    }
}

/// Events named by id, or selected by a filter.
enum Selection {
    Ids(Vec<String>),
    Filter(Filter),
}

impl Selection {
    fn of(ids: Vec<String>, filter: &FilterArgs, now: SystemTime) -> Result<Self, BoxError> {
        match (ids.is_empty(), filter.is_empty()) {
            (false, true) => Ok(Self::Ids(ids)),
            (true, false) if filter.state.is_some() => Ok(Self::Filter(filter.filter(now)?)),
            (true, false) => Err("a filter needs --state (for example --state dead)".into()),
            (true, true) => Err("name the events: their ids, or a filter with --state".into()),
            (false, false) => Err("give either ids or a filter, not both".into()),
        }
    }
}

async fn open(url: &str, table: TableName, read_only: bool) -> Result<Box<dyn Inbox>, BoxError> {
    let acquire = Duration::from_secs(5);
    if url.starts_with("sqlite:") {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(false)
            .read_only(read_only)
            .busy_timeout(Duration::from_secs(2))
            .disable_statement_logging();
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .acquire_timeout(acquire)
            .connect_with(options)
            .await
            .map_err(|error| format!("cannot open {}: {error}", loggable_url(url)))?;
        return Ok(Box::new(SqliteStore::new(pool).with_table(table)));
    }
    if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let mut options = PgConnectOptions::from_str(url)?.disable_statement_logging();
        if read_only {
            options = options.options([("default_transaction_read_only", "on")]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(acquire)
            .connect_with(options)
            .await
            .map_err(|error| format!("cannot connect to {}: {error}", loggable_url(url)))?;
        return Ok(Box::new(PostgresStore::new(pool).with_table(table)));
    }
    if url.starts_with("mysql:") || url.starts_with("mariadb:") {
        let url = url.replacen("mariadb:", "mysql:", 1);
        let options = MySqlConnectOptions::from_str(&url)?.disable_statement_logging();
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(acquire)
            .connect_with(options)
            .await
            .map_err(|error| format!("cannot connect to {}: {error}", loggable_url(&url)))?;
        return Ok(Box::new(MariaDbStore::new(pool).with_table(table)));
    }
    Err(format!(
        "unsupported store {}: use postgres://, sqlite:// or mysql://",
        loggable_url(url)
    )
    .into())
}

/// Whether `url` has a password in its user information (`user:password@`).
fn has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .is_some_and(|(user_info, _)| user_info.contains(':'))
        || rest.contains("password=")
}

/// An error and its sources, as one line.
fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A store error as an operator reads it: a missing table or column says what to do.
fn explain(text: &str, table: &TableName, url: &str) -> BoxError {
    let missing = [
        "does not exist",
        "no such table",
        "no such column",
        "doesn't exist",
        "Unknown column",
    ];
    if missing.iter().any(|sign| text.contains(sign)) {
        return format!(
            "{} has no inbox table {table} (or the table predates inbox mode): start the \
             application once (its migrate() creates or upgrades it); this tool never creates or \
             migrates tables ({text})",
            loggable_url(url)
        )
        .into();
    }
    text.to_owned().into()
}

fn stats_json(stats: &InboxStats) -> Value {
    json!({
        "received": stats.received,
        "in_flight": stats.in_flight,
        "completed": stats.completed,
        "dead": stats.dead,
        "oldest_waiting_seconds": stats.oldest_waiting.map(|age| age.as_secs_f64()),
    })
}

async fn stats(inbox: &dyn Inbox, json: bool) -> Result<ExitCode, BoxError> {
    let stats: InboxStats = inbox.stats().await?;
    let oldest = stats.oldest_waiting.map(|age| age.as_secs_f64());
    if json {
        println!("{}", stats_json(&stats));
    } else {
        println!("received   {}", stats.received);
        println!("in_flight  {}", stats.in_flight);
        println!("completed  {}", stats.completed);
        println!("dead       {}", stats.dead);
        match oldest {
            Some(seconds) => println!("oldest waiting event: received {seconds:.1} s ago"),
            None => println!("no event waiting"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn stats_by_type(inbox: &dyn Inbox, json: bool) -> Result<ExitCode, BoxError> {
    let by_type = inbox.stats_by_type().await?;
    if !json {
        println!(
            "{:<40} {:>9} {:>9} {:>9} {:>9}  oldest waiting",
            "type", "received", "in_flight", "completed", "dead"
        );
    }
    for (kind, stats) in &by_type {
        if json {
            let mut object = stats_json(stats);
            object["type"] = json!(kind);
            println!("{object}");
        } else {
            let oldest = stats
                .oldest_waiting
                .map(|age| format!("{:.1} s", age.as_secs_f64()))
                .unwrap_or_else(|| "-".to_owned());
            println!(
                "{kind:<40} {:>9} {:>9} {:>9} {:>9}  {oldest}",
                stats.received, stats.in_flight, stats.completed, stats.dead
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn summary_json(summary: &EventSummary) -> Value {
    json!({
        "id": summary.event_id,
        "type": summary.event_type,
        "state": summary.state.as_str(),
        "received_at": rfc3339(summary.received_at),
        "attempts": summary.attempts,
        "last_error": summary.last_error,
        "key": summary.ordering_key,
    })
}

async fn list(inbox: &dyn Inbox, filter: Filter, json: bool) -> Result<ExitCode, BoxError> {
    let events = inbox.list(&filter).await?;
    for summary in &events {
        if json {
            println!("{}", summary_json(summary));
        } else {
            println!(
                "{}  {:<9}  {}  attempts {}  {}{}{}",
                rfc3339(summary.received_at),
                summary.state.as_str(),
                summary.event_id,
                summary.attempts,
                summary.event_type,
                summary
                    .ordering_key
                    .as_deref()
                    .map(|key| format!("  key {key}"))
                    .unwrap_or_default(),
                summary
                    .last_error
                    .as_deref()
                    .map(|error| format!("  last error: {error}"))
                    .unwrap_or_default()
            );
        }
    }
    if !json && events.is_empty() {
        println!("no event matches");
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(inbox: &dyn Inbox, id: &str, json: bool) -> Result<ExitCode, BoxError> {
    let Some(record) = inbox.show(id).await? else {
        return Err(unknown(id).into());
    };
    let EventRecord {
        summary,
        due_at,
        replays,
        headers,
        path,
        body,
        history,
        ..
    } = record;
    let body = String::from_utf8_lossy(&body);
    if json {
        let mut object = summary_json(&summary);
        object["due_at"] = json!(due_at.map(rfc3339));
        object["replays"] = json!(replays);
        object["path"] = json!(path);
        object["headers"] = json!(headers);
        object["history"] = json!(history);
        object["body"] = json!(body);
        println!("{object}");
    } else {
        println!("id           {}", summary.event_id);
        println!("type         {}", summary.event_type);
        if let Some(key) = &summary.ordering_key {
            println!("ordering key {key}");
        }
        println!("state        {}", summary.state);
        println!("received at  {}", rfc3339(summary.received_at));
        if let Some(due_at) = due_at {
            println!("due at       {}", rfc3339(due_at));
        }
        println!("attempts     {}", summary.attempts);
        println!("replays      {replays}");
        println!(
            "last error   {}",
            summary.last_error.as_deref().unwrap_or("-")
        );
        println!("path         {path}");
        println!("headers");
        for (name, value) in &headers {
            println!("  {name}: {value}");
        }
        println!("history");
        for line in &history {
            println!("  {line}");
        }
        println!("body");
        println!("{body}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The ids a filter selects, for a dry run or a confirmation: every page of them.
async fn selected(inbox: &dyn Inbox, filter: &Filter) -> Result<Vec<String>, BoxError> {
    let count = inbox.count(filter).await?;
    let limit = u32::try_from(count).unwrap_or(u32::MAX);
    let all = filter.clone().with_limit(limit.max(1));
    Ok(inbox
        .list(&all)
        .await?
        .into_iter()
        .map(|summary| summary.event_id)
        .collect())
}

/// Applies `change` to the selected events; by filter only with `--yes`.
async fn change_selected(
    inbox: &dyn Inbox,
    selection: Selection,
    confirm: &Confirm,
    verb: &str,
) -> Result<Option<Vec<String>>, BoxError> {
    match selection {
        Selection::Ids(ids) => Ok(Some(ids)),
        Selection::Filter(filter) => {
            let count = inbox.count(&filter).await?;
            println!("{count} events match");
            if confirm.dry_run {
                for id in selected(inbox, &filter).await? {
                    println!("would {verb} {id}");
                }
                return Ok(None);
            }
            if !confirm.yes {
                println!(
                    "nothing changed: run again with --yes to {verb} them (--dry-run lists them)"
                );
                return Ok(None);
            }
            Ok(Some(selected(inbox, &filter).await?))
        }
    }
}

async fn replay_events(
    inbox: &dyn Inbox,
    selection: Selection,
    confirm: &Confirm,
    replay: &Replay,
) -> Result<ExitCode, BoxError> {
    let Some(ids) = change_selected(inbox, selection, confirm, "replay").await? else {
        return Ok(ExitCode::SUCCESS);
    };
    each(ids, |id| async move {
        Ok(match inbox.replay(&id, replay).await? {
            Replayed::Replayed => {
                if replay.force {
                    let reason = replay.reason.as_deref().unwrap_or_default();
                    eprintln!("forced replay of {id}: {reason}");
                }
                Ok(format!("replayed {id}"))
            }
            Replayed::InFlight => Err(in_flight(&id)),
            Replayed::Completed => Err(format!(
                "refused {id}: it is completed; --force --reason WHY processes it again"
            )),
            _ => Err(unknown(&id)),
        })
    })
    .await
}

async fn discard_events(
    inbox: &dyn Inbox,
    selection: Selection,
    confirm: &Confirm,
) -> Result<ExitCode, BoxError> {
    let Some(ids) = change_selected(inbox, selection, confirm, "discard").await? else {
        return Ok(ExitCode::SUCCESS);
    };
    each(ids, |id| async move {
        Ok(match inbox.discard(&id).await? {
            Discarded::Discarded => Ok(format!("discarded {id}")),
            Discarded::InFlight => Err(in_flight(&id)),
            _ => Err(unknown(&id)),
        })
    })
    .await
}

/// Changes each event with `change`, which answers what it did (printed) or why it refused
/// (printed on stderr): 0 when nothing was refused, 1 otherwise.
async fn each<F, Done>(ids: Vec<String>, mut change: F) -> Result<ExitCode, BoxError>
where
    F: FnMut(String) -> Done,
    Done: std::future::Future<Output = Result<Result<String, String>, BoxError>>,
{
    let mut refused = 0;
    for id in ids {
        match change(id).await? {
            Ok(done) => println!("{done}"),
            Err(refusal) => {
                refused += 1;
                eprintln!("{refusal}");
            }
        }
    }
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn in_flight(id: &str) -> String {
    format!("refused {id}: a worker is processing it right now")
}

fn unknown(id: &str) -> String {
    format!("unknown event {id}: the inbox does not hold it")
}

/// An age (`90s`, `30m`, `2h`, `7d`) before `now`, or a UTC date (`2026-12-01`) or time
/// (`2026-12-01T08:00:00Z`).
pub fn parse_time(text: &str, now: SystemTime) -> Result<SystemTime, BoxError> {
    let bad = || -> BoxError {
        format!("bad time {text:?}: use an age (90s, 30m, 2h, 7d) or a UTC date (2026-12-01, 2026-12-01T08:00:00Z)").into()
    };
    if let Some(unit) = text.chars().last().filter(char::is_ascii_alphabetic)
        && text[..text.len() - 1].bytes().all(|b| b.is_ascii_digit())
        && text.len() > 1
    {
        let amount: u64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
        let seconds = match unit {
            's' => amount,
            'm' => amount * 60,
            'h' => amount * 3600,
            'd' => amount * 86_400,
            _ => return Err(bad()),
        };
        return now
            .checked_sub(Duration::from_secs(seconds))
            .ok_or_else(bad);
    }
    let (date, time) = match text.split_once('T') {
        Some((date, time)) => (date, Some(time.strip_suffix('Z').ok_or_else(bad)?)),
        None => (text, None),
    };
    let numbers = |part: &str, separator: char| -> Result<Vec<u64>, BoxError> {
        part.split(separator)
            .map(|n| n.parse::<u64>().map_err(|_| bad()))
            .collect()
    };
    let [year, month, day] = numbers(date, '-')?[..] else {
        return Err(bad());
    };
    let (hour, minute, second) = match time {
        Some(time) => match numbers(time, ':')?[..] {
            [hour, minute, second] => (hour, minute, second),
            _ => return Err(bad()),
        },
        None => (0, 0, 0),
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    // Days from civil (Howard Hinnant's algorithm), for 1970-01-01 on.
    let (y, m) = if month <= 2 {
        (year as i64 - 1, month + 9)
    } else {
        (year as i64, month - 3)
    };
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let day_of_year = (153 * m as i64 + 2) / 5 + day as i64 - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds =
        u64::try_from(days).map_err(|_| bad())? * 86_400 + hour * 3600 + minute * 60 + second;
    Ok(UNIX_EPOCH + Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_ages_or_utc_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(
            parse_time("2h", now).unwrap(),
            now - Duration::from_secs(7200)
        );
        assert_eq!(
            parse_time("7d", now).unwrap(),
            now - Duration::from_secs(7 * 86_400)
        );
        let date = parse_time("2023-11-14", now).unwrap();
        assert_eq!(rfc3339(date), "2023-11-14T00:00:00.000Z");
        let time = parse_time("2023-11-14T22:13:20Z", now).unwrap();
        assert_eq!(time, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        for bad in [
            "",
            "h",
            "2w",
            "yesterday",
            "2023-13-01",
            "2023-11-14T22:13:20",
        ] {
            assert!(parse_time(bad, now).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn passwords_in_urls_are_noticed() {
        assert!(has_password("postgres://app:secret@db/app"));
        assert!(has_password("postgres://db/app?password=secret"));
        assert!(!has_password("postgres://app@db/app"));
        assert!(!has_password("sqlite://webhooks.db"));
    }
}
