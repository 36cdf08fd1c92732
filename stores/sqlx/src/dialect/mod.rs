//! The databases the store runs on: [`Postgres`], [`Sqlite`] and [`MariaDb`], each behind its
//! feature. What differs between them (their SQL, in the crate's `queries/` folder, how they
//! report a conflict, their migration and their purge) is sealed inside this crate; everything
//! else (the store, the rules, the errors, the purge task) is written once, in [`SqlStore`].

#[cfg(feature = "mariadb")]
mod mariadb;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::{future::Future, sync::Arc, time::Duration};

#[cfg(feature = "mariadb")]
pub use mariadb::MariaDb;
#[cfg(feature = "postgres")]
pub use postgres::Postgres;
// The dialects use `InboxTemplates`; without one (no database feature) nothing does.
#[cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mariadb")),
    allow(unused_imports)
)]
pub(crate) use sealed::InboxTemplates;
pub(crate) use sealed::{
    Bind, Driver, KeyOf, ManyRows, RecordRow, Sealed, StatsRow, SummaryRow, TakenRow,
};
#[cfg(feature = "sqlite")]
pub use sqlite::Sqlite;
use sqlx::{
    AssertSqlSafe, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type,
    error::DatabaseError,
};

use crate::{Error, GroupCommit, SqlStore, TableName, error::MAX_SPAN, group_commit::WriteError};

/// The columns of the provider's documented schema that the store cannot add: a table without
/// them is not an idempotency table.
const REQUIRED_COLUMNS: [&str; 2] = ["event_id", "event_type"];

/// The columns the store adds to a table of the provider's documented schema (or of any
/// version before).
#[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
const STORE_COLUMNS: [&str; 4] = ["processed_at", "state", "claim_token", "expires_at"];

/// The columns inbox mode adds to a table of the store's previous release.
#[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
const INBOX_COLUMNS: [&str; 12] = [
    "received_at",
    "replayed_at",
    "sequence",
    "body",
    "headers",
    "request_path",
    "due_at",
    "attempts",
    "replays",
    "last_error",
    "history",
    "ordering_key",
];

/// Refuses an existing `table` (with the `present` columns, lower case) that lacks a column
/// the store cannot add. An empty `present` is no table at all: fine.
fn refuse_unusable(table: &TableName, present: &[String]) -> Result<(), Error> {
    if present.is_empty() {
        return Ok(());
    }
    let missing: Vec<String> = REQUIRED_COLUMNS
        .iter()
        .filter(|column| !present.iter().any(|present| present == *column))
        .map(|column| (*column).to_owned())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::IncompatibleTable {
            table: table.as_str().to_owned(),
            missing,
        })
    }
}

/// Whether `present` has every column the store needs.
#[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
fn has_store_columns(present: &[String]) -> bool {
    STORE_COLUMNS
        .iter()
        .chain(&REQUIRED_COLUMNS)
        .chain(&INBOX_COLUMNS)
        .all(|column| present.iter().any(|present| present == *column))
}

/// A database the store runs on: [`Postgres`], [`Sqlite`] or [`MariaDb`] (each behind its
/// feature), as in [`SqlStore<Postgres>`](SqlStore). Sealed: the store's correctness rests on
/// each dialect's statements, which this crate tests against the real databases.
pub trait Dialect: Sealed + Send + Sync + Sized + 'static {
    /// The sqlx database: [`sqlx::Postgres`], [`sqlx::Sqlite`] or [`sqlx::MySql`].
    type Database: Driver;
}

/// What the store needs of a dialect and of its sqlx database, out of users' reach: the traits
/// and types of this module are public (the [`Dialect`] trait names them) but cannot be named
/// outside the crate.
mod sealed {
    use super::*;
    use crate::{
        group_commit::{Answer, Write},
        queries::Query,
    };

    /// The dialect's internals: its SQL, how it reports a conflict, its migration and purge.
    pub trait Sealed: Sized {
        /// How many connections the pool of the store's `connect` opens at most.
        const MAX_CONNECTIONS: u32;

        /// The dialect's SQL: the files of `queries/<dialect>/`.
        const SQL: Templates;

        /// How the store groups concurrent writes into one commit, by default.
        const GROUP_COMMIT: GroupCommit = GroupCommit::OFF;

        /// The statements that begin a group commit's transaction, sent in one query
        /// (`None`: the database's default `BEGIN`): SQLite's `BEGIN IMMEDIATE`,
        /// PostgreSQL's `BEGIN` with the group's short lock timeout.
        const GROUP_BEGIN: Option<&'static str> = None;

        /// Whether inbox mode's receipts, takes and settlements may be grouped: their
        /// statements are the default ones, each one statement on the pool.
        const GROUP_INBOX: bool = true;

        /// Whether inbox mode's receipts without an ordering key may be grouped where its
        /// other writes are not (`GROUP_INBOX` false): each is then one statement in the
        /// group's transaction (MariaDB, whose receipts with a key take a lock of the session
        /// and run alone).
        const GROUP_RECEIPTS_WITHOUT_KEY: bool = false;

        /// Whether a group commit's writers run on threads of their own (where the connection
        /// answers from a thread of its own) rather than as tasks of the runtime.
        const GROUP_WRITER_THREAD: bool = false;

        /// Whether a write that finds its writer idle, and no write waiting for it, is written
        /// by its caller, as alone, instead of by the writer (where the hop to the writer's
        /// thread and back costs a lone request more than its statement's round trip).
        const LONE_WRITE_BY_CALLER: bool = false;

        /// Whether a group that is a single statement of many rows runs as that statement
        /// alone, without `BEGIN` and `COMMIT`: where a statement outside a transaction is a
        /// transaction of its own, which takes the write lock before it reads and is committed
        /// (flushed) before its last row is answered (SQLite).
        const GROUP_OF_ONE_STATEMENT_COMMITS_ITSELF: bool = false;

        /// Whether a group of statements of many rows sends its `BEGIN` with its first
        /// statement and its `COMMIT` with its last, in one round trip each, instead of one of
        /// their own: where a round trip is a hop to the connection's thread, and a query may
        /// hold several statements (SQLite).
        const GROUP_BEGIN_AND_COMMIT_RIDE_ALONG: bool = false;

        /// How long a grouped claim or renewal waits for a row lock: a group never waits
        /// long behind a row that another transaction holds (the write then runs alone,
        /// under the store's lock timeout). `None`: the store's lock timeout.
        const GROUP_LOCK_TIMEOUT: Option<Duration> = None;

        /// Whether the writes that commit asynchronously on their own (inbox takes,
        /// releases, asynchronous claims) may join a group: not where the setting would carry
        /// over to the group's other writes (PostgreSQL's `synchronous_commit`, set for the
        /// transaction).
        const GROUP_ASYNCHRONOUS: bool = true;

        /// The statements that write many operations of one kind at once in a group commit
        /// (`*_many.sql`), where the dialect has them.
        const MANY: Option<ManyTemplates> = None;

        /// How a statement of many rows writes its rows in place of `{rows}`: `(…), (…)`
        /// by default, for a `VALUES`.
        const MANY_ROWS: ManyRows = ManyRows {
            open: "(",
            close: ")",
            between: ", ",
        };

        /// The placeholder of the bind at `position` (from 1) in a statement of many rows,
        /// which binds `bind` there: `?` by default.
        fn placeholder(_position: usize, _bind: Bind<'_>) -> String {
            "?".to_owned()
        }

        /// Whether `error` says that the database aborted the statement to resolve a conflict
        /// between transactions (a serialization failure or a deadlock): the claim then lost a
        /// race for the row, which is answered as in flight. A lock wait that ran out of time
        /// is not a conflict: nothing says who holds the row, and the claim fails (503).
        fn is_conflict(error: &dyn DatabaseError) -> bool;

        /// Creates or upgrades the store's table.
        fn migrate(store: &SqlStore<Self>) -> impl Future<Output = Result<(), Error>> + Send
        where
            Self: Dialect;

        /// Starts listening for inbox notifications from other processes, on the first call
        /// for a store (the dialects with notifications: PostgreSQL's `LISTEN`). Others poll.
        fn listen(_store: &SqlStore<Self>)
        where
            Self: Dialect,
        {
        }

        /// Runs one of inbox mode's statements with its operation's `binds`: the first column
        /// of its first row, if any. By default the file's one statement, on the pool.
        fn inbox_text<'a>(
            store: &'a SqlStore<Self>,
            query: &'a Query,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a
        where
            Self: Dialect,
        {
            async move {
                debug_assert!(query.then.is_empty(), "one statement");
                let binds = query.binds(binds);
                <Self as Dialect>::Database::fetch_text(store.pool(), &query.sql, &binds).await
            }
        }

        /// Runs inbox mode's `receive` or `replay` with its `binds`, the operations that give
        /// an event its place in the order of receipt (`key`: whose ordering key they lock
        /// meanwhile): the first column of its first row, if any. By default
        /// [`inbox_text`](Self::inbox_text), whose statements lock the key themselves (a
        /// transaction's lock), or need no lock (one writer at a time).
        fn inbox_in_key_order<'a>(
            store: &'a SqlStore<Self>,
            query: &'a Query,
            binds: &'a [Bind<'a>],
            _key: KeyOf<'a>,
        ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a
        where
            Self: Dialect,
        {
            Self::inbox_text(store, query, binds)
        }

        /// Runs inbox mode's `complete` with its `binds` (event id, token, retention):
        /// whether the token holds the event, now completed. By default as the other
        /// owner-checked operations, in a group commit where the dialect groups them.
        fn inbox_completed<'a>(
            store: &'a SqlStore<Self>,
            query: &'a Query,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<bool, sangho_webhook::store::StoreError>> + Send + 'a
        where
            Self: Dialect,
        {
            async move {
                let many = store.grouped_queries().many.as_ref();
                let many = many.and_then(|many| many.inbox_complete.as_ref());
                store.inbox_owned(query, binds, many).await
            }
        }

        /// Runs inbox mode's `take` with its `binds`: the taken row, if any. By default the
        /// file's one statement, in a group commit where the dialect groups them (committed
        /// asynchronously where the dialect lets it).
        fn inbox_taken<'a>(
            store: &'a SqlStore<Self>,
            query: &'a Query,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Option<TakenRow>, WriteError>> + Send + 'a
        where
            Self: Dialect,
        {
            async move {
                debug_assert!(query.then.is_empty(), "one statement");
                let many = store.grouped_queries().many.as_ref();
                let take = Write::take(&query.sql, &query.binds(binds))
                    .alone_if(store.commits_asynchronously(true))
                    .in_many(many.and_then(|many| many.inbox_take.as_ref()));
                store.write(take).await.map(Answer::into_taken)
            }
        }

        /// Tells the inbox workers of other processes that an event may be due (the dialects
        /// with notifications: PostgreSQL's `NOTIFY`). This process's own are woken already.
        fn notify_other_processes(_store: &SqlStore<Self>)
        where
            Self: Dialect,
        {
        }

        /// Deletes at most `batch` rows past their own expiry, and at most `batch` rows without
        /// one (written by another tool) claimed more than `retention` ago, each in one short
        /// transaction at READ COMMITTED with statement and lock timeouts: how many it deleted.
        fn purge_batch(
            store: &SqlStore<Self>,
            retention: Duration,
            batch: u64,
        ) -> impl Future<Output = Result<u64, Error>> + Send
        where
            Self: Dialect;
    }

    /// A dialect's SQL files, as included: templates in the placeholder convention of
    /// `queries/README.md`, rendered once per store by [`Queries`](crate::queries::Queries).
    #[derive(Debug, Clone, Copy)]
    pub struct Templates {
        /// `claim.sql`: answers a `status` (see [`ClaimRow`](crate::queries::ClaimRow)).
        pub(crate) claim: &'static str,
        /// Which of (event id, event type, token, lease) [`claim`](Self::claim) binds, in
        /// order (`?` placeholders bind by position).
        pub(crate) claim_binds: &'static [usize],
        /// `state.sql`, where a claim that did not acquire the event answers nothing, so that
        /// the store reads the record's state to tell completed from in flight.
        pub(crate) state: Option<&'static str>,
        /// `renew.sql`: answers the row's owner, or no row.
        pub(crate) renew: &'static str,
        /// `complete.sql`: answers the row's owner, or no row.
        pub(crate) complete: &'static str,
        /// `release.sql`: answers the removed row's owner, or no row.
        pub(crate) release: &'static str,
        /// The files of one purge batch, in order.
        pub(crate) purge: &'static [&'static str],
        /// The files that adopt an existing table before the migration script runs (SQLite's
        /// added columns and adopted rows).
        pub(crate) adopt: &'static [&'static str],
        /// `cron_purge.sql`.
        pub(crate) cron_purge: &'static str,
        /// The migration script (`migrations/<dialect>.sql`), for the default table.
        pub(crate) schema: &'static str,
        /// Inbox mode's statements (`None` where inbox mode is not available yet).
        pub(crate) inbox: Option<InboxTemplates>,
    }

    /// How the rows of a statement of many rows are written: each row's placeholders,
    /// comma-separated, between `open` and `close`, and the rows joined by `between`.
    #[derive(Debug, Clone, Copy)]
    pub struct ManyRows {
        pub(crate) open: &'static str,
        pub(crate) close: &'static str,
        pub(crate) between: &'static str,
    }

    /// The statements of many rows (`*_many.sql`): each writes many operations of one kind
    /// in one statement, each row as the operation's own statement writes it, and answers
    /// (`event_id`, answer) for the rows it wrote (see `queries/README.md`).
    #[derive(Debug, Clone, Copy)]
    pub struct ManyTemplates {
        /// `claim_many.sql`, binding the claim's binds in their order.
        pub(crate) claim: &'static str,
        /// Whether `claim` answers a claim in flight by its owner (`in_flight <token>`),
        /// which the store reads as `acquired` for the claim of that token: where a
        /// statement of many rows cannot compare a row with the values it wrote for it.
        pub(crate) claim_by_owner: bool,
        /// `state_many.sql`, where `claim` answers only the claims it acquired: the state of
        /// the others.
        pub(crate) state: Option<&'static str>,
        /// `complete_many.sql`, binding the completion's binds in their order.
        pub(crate) complete: &'static str,
        /// `inbox_receive_many.sql`, binding the receipt's binds in their order, where the
        /// group commit writes receipts; where the dialect has
        /// [`InboxTemplates::receive_taken`], each row then binds the token and lease of the
        /// waiting take that the event is written taken by (NULL and NULL for none).
        pub(crate) receive: Option<&'static str>,
        /// `inbox_receive_numbers.sql`, where `receive` cannot tell its own rows from others:
        /// it draws each receipt's sequence number first, bound after the receipt's binds,
        /// and `receive` answers an inbox row by the number it holds (`sequence <n>`), which
        /// the store reads as `stored` for the receipt that drew that number.
        pub(crate) receive_numbers: Option<&'static str>,
        /// `inbox_complete_many.sql`, binding a worker's completion's binds in their order,
        /// where the group commit writes the workers' completions (not where the dialect
        /// serves them in turns).
        pub(crate) inbox_complete: Option<&'static str>,
        /// `inbox_take_many.sql`, binding a worker's take's binds in their order, where the
        /// group commit writes the workers' takes (not where the dialect serves them in
        /// turns).
        pub(crate) inbox_take: Option<&'static str>,
    }

    /// One statement file, and which of its operation's binds (in the order of
    /// `queries/README.md`) it binds, in order (`?` placeholders bind by position).
    pub(crate) type Template = (&'static str, &'static [usize]);

    /// Inbox mode's SQL files (`inbox_<operation>.sql`).
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct InboxTemplates {
        pub(crate) receive: Template,
        /// The receipt of an event without an ordering key, written already taken by a
        /// worker whose take waits (the receipt's binds, then the take's token and lease),
        /// where the dialect has it.
        pub(crate) receive_taken: Option<Template>,
        pub(crate) take: Template,
        pub(crate) renew: Template,
        pub(crate) complete: Template,
        pub(crate) fail: Template,
        pub(crate) abandon: Template,
        pub(crate) state: Template,
        pub(crate) stats: Template,
        pub(crate) gauges: Template,
        pub(crate) stats_by_type: Template,
        pub(crate) list: Template,
        pub(crate) count: Template,
        pub(crate) show: Template,
        pub(crate) replay: Template,
        pub(crate) discard: Template,
    }

    /// A value bound to a statement.
    #[derive(Debug, Clone, Copy)]
    pub enum Bind<'a> {
        /// Text: an id, a type, a token.
        Text(&'a str),
        /// An integer: a duration in microseconds.
        Int(i64),
        /// Text or NULL: a filter's condition.
        OptText(Option<&'a str>),
        /// An integer or NULL: a filter's time, in Unix milliseconds.
        OptInt(Option<i64>),
        /// Bytes: a body.
        Bytes(&'a [u8]),
    }

    impl Bind<'_> {
        /// The value of a padding row of a statement of many rows in this value's column:
        /// NULL of its type (empty bytes for bytes: a padding row's event id is NULL, and the
        /// row is never written).
        pub(crate) fn padding(&self) -> Bind<'static> {
            match self {
                Self::Text(_) | Self::OptText(_) => Bind::OptText(None),
                Self::Int(_) | Self::OptInt(_) => Bind::OptInt(None),
                Self::Bytes(_) => Bind::Bytes(&[]),
            }
        }
    }

    /// Whose ordering key a receipt or a replay locks while it gives an event its sequence
    /// number.
    #[derive(Debug, Clone, Copy)]
    pub enum KeyOf<'a> {
        /// A receipt's: its ordering key, if it has one.
        Receipt(Option<&'a str>),
        /// A replay's: the key stored with the event of this id, if it has one.
        Replay(&'a str),
    }

    /// What the store needs of a sqlx database: running a statement with its binds and reading
    /// an optional text answer. Implemented for sqlx's PostgreSQL, SQLite and MySQL databases.
    pub trait Driver: Database {
        /// Runs `sql` with `binds` on `pool`: the first column of the first row, if any.
        fn fetch_text<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a;

        /// Runs `sql` with `binds` on `connection` (inside whatever transaction it has open):
        /// the first column of the first row, if any.
        fn fetch_text_in<'a>(
            connection: &'a mut Self::Connection,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a;

        /// Runs `sql` with `binds` on `connection` (inside whatever transaction it has open):
        /// how many rows it changed.
        fn execute_in<'a>(
            connection: &'a mut Self::Connection,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;

        /// Runs `sql` with `binds` on `connection` (inside whatever transaction it has open):
        /// its rows of an event id and an optional text.
        fn fetch_pairs_in<'a>(
            connection: &'a mut Self::Connection,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Vec<(String, Option<String>)>, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `take` on `connection` (inside whatever transaction it has open):
        /// the taken row, if any.
        fn fetch_taken_in<'a>(
            connection: &'a mut Self::Connection,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Option<TakenRow>, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `take_many` on `connection` (inside whatever transaction it has
        /// open): each taken row, with the token it was taken under.
        fn fetch_taken_many_in<'a>(
            connection: &'a mut Self::Connection,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Vec<TakenByToken>, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `take`: the taken row, if any.
        fn fetch_taken<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Option<TakenRow>, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `list`: its rows.
        fn fetch_summaries<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Vec<SummaryRow>, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `show`: the row, if any.
        fn fetch_record<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<Option<RecordRow>, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `stats`: its one row.
        fn fetch_stats<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
        ) -> impl Future<Output = Result<StatsRow, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `gauges`: its one row.
        fn fetch_gauges<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
        ) -> impl Future<Output = Result<GaugesRow, sqlx::Error>> + Send + 'a;

        /// Runs inbox mode's `stats_by_type`: its rows.
        fn fetch_type_stats<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
        ) -> impl Future<Output = Result<Vec<TypeStatsRow>, sqlx::Error>> + Send + 'a;

        /// Runs a statement that answers one integer (a count).
        fn fetch_int<'a>(
            pool: &'a Pool<Self>,
            sql: &'a Arc<str>,
            binds: &'a [Bind<'a>],
        ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'a;
    }

    /// A statement's result: how many rows it changed (each database's own `rows_affected`).
    pub trait RowsAffected {
        /// How many rows the statement changed.
        fn rows(&self) -> u64;
    }

    /// A taken event: id, type, body, headers, path, received and budget start (Unix ms),
    /// attempt, ordering key.
    pub(crate) type TakenRow = (
        String,
        String,
        Vec<u8>,
        Option<String>,
        Option<String>,
        i64,
        i64,
        i64,
        Option<String>,
    );

    /// A taken event of a statement of many takes: [`TakenRow`]'s columns, then the claim
    /// token it was taken under.
    pub(crate) type TakenByToken = (
        String,
        String,
        Vec<u8>,
        Option<String>,
        Option<String>,
        i64,
        i64,
        i64,
        Option<String>,
        String,
    );

    /// A listed event: id, type, state, received (Unix ms), attempts, last error, ordering
    /// key.
    pub(crate) type SummaryRow = (
        String,
        String,
        String,
        i64,
        i64,
        Option<String>,
        Option<String>,
    );

    /// A shown event: a [`SummaryRow`]'s columns, then due (Unix ms), replays, headers, path,
    /// body, history.
    pub(crate) type RecordRow = (
        String,
        String,
        String,
        i64,
        i64,
        Option<String>,
        Option<String>,
        Option<i64>,
        i64,
        Option<String>,
        Option<String>,
        Vec<u8>,
        Option<String>,
    );

    /// The stats: received, in flight, completed, dead, the oldest waiting event's age (ms).
    pub(crate) type StatsRow = (i64, i64, i64, i64, Option<i64>);

    /// The gauges: received, in flight, dead, the oldest waiting event's age (ms).
    pub(crate) type GaugesRow = (i64, i64, i64, Option<i64>);

    /// One type's stats: the type, then a [`StatsRow`]'s columns.
    pub(crate) type TypeStatsRow = (String, i64, i64, i64, i64, Option<i64>);
}

/// `duration` in whole microseconds, the one duration encoding of every statement (each
/// dialect's SQL turns it into its own interval or time unit). Longer than about 1000 years
/// counts as that.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.min(MAX_SPAN).as_micros()).unwrap_or(i64::MAX)
}

macro_rules! rows_affected {
    ($($feature:literal => $result:ty),*) => {$(
        #[cfg(feature = $feature)]
        impl sealed::RowsAffected for $result {
            fn rows(&self) -> u64 {
                self.rows_affected()
            }
        }
    )*};
}

rows_affected!(
    "postgres" => sqlx::postgres::PgQueryResult,
    "sqlite" => sqlx::sqlite::SqliteQueryResult,
    "mariadb" => sqlx::mysql::MySqlQueryResult
);

/// `query` (a `Query` or a `QueryAs`) with each of `binds` bound, in order.
macro_rules! bind_each {
    ($query:expr, $binds:expr) => {
        $binds.iter().fold($query, |query, bind| match *bind {
            Bind::Text(text) => query.bind(text),
            Bind::Int(int) => query.bind(int),
            Bind::OptText(text) => query.bind(text),
            Bind::OptInt(int) => query.bind(int),
            Bind::Bytes(bytes) => query.bind(bytes),
        })
    };
}

impl<DB> Driver for DB
where
    DB: Database,
    DB::QueryResult: sealed::RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String, Option<String>): FromRow<'r, DB::Row>,
    for<'r> TakenRow: FromRow<'r, DB::Row>,
    for<'r> sealed::TakenByToken: FromRow<'r, DB::Row>,
    for<'r> SummaryRow: FromRow<'r, DB::Row>,
    for<'r> RecordRow: FromRow<'r, DB::Row>,
    for<'r> sealed::StatsRow: FromRow<'r, DB::Row>,
    for<'r> sealed::GaugesRow: FromRow<'r, DB::Row>,
    for<'r> sealed::TypeStatsRow: FromRow<'r, DB::Row>,
{
    fn fetch_text<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a {
        let query = text_query::<DB>(sql, binds);
        async move { Ok(query.fetch_optional(pool).await?.map(|(text,)| text)) }
    }

    fn fetch_text_in<'a>(
        connection: &'a mut Self::Connection,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a {
        let query = text_query::<DB>(sql, binds);
        async move { Ok(query.fetch_optional(connection).await?.map(|(text,)| text)) }
    }

    fn execute_in<'a>(
        connection: &'a mut Self::Connection,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a {
        let query = bind_each!(sqlx::query::<DB>(AssertSqlSafe(sql.clone())), binds);
        async move {
            Ok(sealed::RowsAffected::rows(
                &query.execute(connection).await?,
            ))
        }
    }

    fn fetch_pairs_in<'a>(
        connection: &'a mut Self::Connection,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Vec<(String, Option<String>)>, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, (String, Option<String>)>(sql, binds);
        async move { query.fetch_all(connection).await }
    }

    fn fetch_taken_in<'a>(
        connection: &'a mut Self::Connection,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<TakenRow>, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, TakenRow>(sql, binds);
        async move { query.fetch_optional(connection).await }
    }

    fn fetch_taken_many_in<'a>(
        connection: &'a mut Self::Connection,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Vec<sealed::TakenByToken>, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, sealed::TakenByToken>(sql, binds);
        async move { query.fetch_all(connection).await }
    }

    fn fetch_taken<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<TakenRow>, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, TakenRow>(sql, binds);
        async move { query.fetch_optional(pool).await }
    }

    fn fetch_summaries<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Vec<SummaryRow>, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, SummaryRow>(sql, binds);
        async move { query.fetch_all(pool).await }
    }

    fn fetch_record<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<RecordRow>, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, RecordRow>(sql, binds);
        async move { query.fetch_optional(pool).await }
    }

    fn fetch_stats<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
    ) -> impl Future<Output = Result<sealed::StatsRow, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, sealed::StatsRow>(sql, &[]);
        async move { query.fetch_one(pool).await }
    }

    fn fetch_gauges<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
    ) -> impl Future<Output = Result<sealed::GaugesRow, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, sealed::GaugesRow>(sql, &[]);
        async move { query.fetch_one(pool).await }
    }

    fn fetch_type_stats<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
    ) -> impl Future<Output = Result<Vec<sealed::TypeStatsRow>, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, sealed::TypeStatsRow>(sql, &[]);
        async move { query.fetch_all(pool).await }
    }

    fn fetch_int<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'a {
        let query = row_query::<DB, (i64,)>(sql, binds);
        async move { Ok(query.fetch_one(pool).await?.0) }
    }
}

/// `sql` with `binds`, answering one text column.
fn text_query<'a, DB>(
    sql: &Arc<str>,
    binds: &'a [Bind<'a>],
) -> sqlx::query::QueryAs<'a, DB, (String,), DB::Arguments>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    row_query::<DB, (String,)>(sql, binds)
}

/// `sql` with `binds`, answering rows of `Row`.
fn row_query<'a, DB, Row>(
    sql: &Arc<str>,
    binds: &'a [Bind<'a>],
) -> sqlx::query::QueryAs<'a, DB, Row, DB::Arguments>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'r> Row: FromRow<'r, DB::Row>,
{
    bind_each!(sqlx::query_as::<DB, Row>(AssertSqlSafe(sql.clone())), binds)
}
