//! What differs between the databases: each [`Dialect`] supplies its SQL, how it encodes a
//! duration, how it reads a claim's answer, its migration and its purge. Everything else (the
//! store, the rules, the errors, the purge task) is written once, in [`SqlStore`].

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
#[cfg(feature = "sqlite")]
pub use sqlite::Sqlite;
use sqlx::{
    AssertSqlSafe, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type,
    error::DatabaseError,
};

use crate::{Error, SqlStore, TableName, error::MAX_SPAN};

/// The columns of the provider's documented schema that the store cannot add: a table without
/// them is not an idempotency table.
const REQUIRED_COLUMNS: [&str; 2] = ["event_id", "event_type"];

/// The columns the store adds to a table of the provider's documented schema (or of any
/// version before).
#[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
const STORE_COLUMNS: [&str; 4] = ["processed_at", "state", "claim_token", "expires_at"];

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
        .all(|column| present.iter().any(|present| present == *column))
}

mod sealed {
    pub trait Sealed {}
}

/// A database the store runs on: [`Postgres`], [`Sqlite`] or [`MariaDb`] (each behind its
/// feature). Sealed: the store's correctness rests on each dialect's statements, which this
/// crate tests against the real databases.
pub trait Dialect: sealed::Sealed + Send + Sync + Sized + 'static {
    /// The sqlx database.
    type Database: Driver;

    /// How many connections the pool of the store's `connect` opens at most.
    const MAX_CONNECTIONS: u32;

    /// The statements.
    #[doc(hidden)]
    const STATEMENTS: Statements;

    /// The migration script, for the default table.
    #[doc(hidden)]
    const SCHEMA: &'static str;

    /// Whether a claim that did not acquire the event answers nothing, so that the store
    /// reads the record's state to tell completed from in flight.
    #[doc(hidden)]
    const READS_STATE_OF_A_DUPLICATE: bool;

    /// Whether `error` says that the database aborted the statement to resolve a conflict
    /// between transactions (a serialization failure or a deadlock): the claim then lost a race
    /// for the row, which is answered as in flight. A lock wait that ran out of time is not a
    /// conflict: nothing says who holds the row, and the claim fails (503).
    #[doc(hidden)]
    fn is_conflict(error: &dyn DatabaseError) -> bool;

    /// Creates or upgrades the store's table.
    #[doc(hidden)]
    fn migrate(store: &SqlStore<Self>) -> impl Future<Output = Result<(), Error>> + Send;

    /// Deletes at most `batch` rows past their own expiry, and at most `batch` rows without
    /// one (written by another tool) claimed more than `retention` ago, each in one short
    /// transaction at READ COMMITTED with statement and lock timeouts: how many it deleted.
    #[doc(hidden)]
    fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    /// The plain SQL of one purge batch for cron, for the default table: the same answer from
    /// a session in any time zone.
    #[doc(hidden)]
    const CRON_PURGE: &'static str;
}

/// A dialect's statement templates; `{table}` stands for the table name, `{commit}` for
/// [`asynchronous_commit`](Self::asynchronous_commit) in a store with asynchronous claims and
/// for `NULL` otherwise, `{lock_timeout}` (in claim and renew) for
/// [`lock_timeout`](Self::lock_timeout).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Statements {
    /// An SQL expression that lowers the durability of its statement's own transaction, for
    /// the `{commit}` of asynchronous claims.
    pub asynchronous_commit: &'static str,
    /// The SQL that bounds the lock waits of its statement by the store's lock timeout, where
    /// the claim and renew templates say `{lock_timeout}`; in it `{milliseconds}` and
    /// `{seconds}` stand for the timeout in whole units, rounded up (at least 1). Empty where
    /// the bound is the connection's own (SQLite's busy timeout).
    pub lock_timeout: &'static str,
    /// Which of (event id, event type, token, lease) [`claim`](Self::claim) binds, in order
    /// (`?` placeholders bind by position).
    pub claim_binds: &'static [usize],
    /// Binds: event id, event type, token, lease (µs). Answers one text column: `acquired` or
    /// the claimer's token (acquired), `completed`, `in_flight` or another token (in flight); or
    /// no row (in flight, or read the state: [`Dialect::READS_STATE_OF_A_DUPLICATE`]).
    pub claim: &'static str,
    /// Binds: event id, event type, token, lease (µs). Answers the row's owner, or no row.
    pub renew: &'static str,
    /// Binds: event id, event type, token, retention (µs). Answers the row's owner, or no row.
    pub complete: &'static str,
    /// Binds: event id, token. Answers the removed row's owner, or no row.
    pub release: &'static str,
    /// Binds: event id. Answers the row's `state`.
    pub state: &'static str,
}

/// A value bound to a statement.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Bind<'a> {
    /// Text: an id, a type, a token.
    Text(&'a str),
    /// An integer: a duration in microseconds.
    Int(i64),
}

/// `duration` in whole microseconds, the one duration encoding of every statement (each
/// dialect's SQL turns it into its own interval or time unit). Longer than about 1000 years
/// counts as that.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.min(MAX_SPAN).as_micros()).unwrap_or(i64::MAX)
}

/// What the store needs of a sqlx database: running a statement with its binds and reading an
/// optional text answer. Implemented for sqlx's PostgreSQL, SQLite and MySQL databases.
pub trait Driver: Database {
    /// Runs `sql` with `binds` on `pool`: the first column of the first row, if any.
    #[doc(hidden)]
    fn fetch_text<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a;

    /// Runs `sql` with `binds` on `connection` (inside whatever transaction it has open): the
    /// first column of the first row, if any.
    #[doc(hidden)]
    fn fetch_text_in<'a>(
        connection: &'a mut Self::Connection,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a;
}

impl<DB> Driver for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    fn fetch_text<'a>(
        pool: &'a Pool<Self>,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a {
        let query = binds.iter().fold(
            sqlx::query_as::<DB, (String,)>(AssertSqlSafe(sql.clone())),
            |query, bind| match *bind {
                Bind::Text(text) => query.bind(text),
                Bind::Int(int) => query.bind(int),
            },
        );
        async move { Ok(query.fetch_optional(pool).await?.map(|(text,)| text)) }
    }

    fn fetch_text_in<'a>(
        connection: &'a mut Self::Connection,
        sql: &'a Arc<str>,
        binds: &'a [Bind<'a>],
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a {
        let query = binds.iter().fold(
            sqlx::query_as::<DB, (String,)>(AssertSqlSafe(sql.clone())),
            |query, bind| match *bind {
                Bind::Text(text) => query.bind(text),
                Bind::Int(int) => query.bind(int),
            },
        );
        async move { Ok(query.fetch_optional(connection).await?.map(|(text,)| text)) }
    }
}
