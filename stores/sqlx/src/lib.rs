//! SQL idempotency stores for [`sangho_webhook`], over [sqlx](https://docs.rs/sqlx):
//!
//! | store | feature | database |
//! | --- | --- | --- |
//! | [`PostgresStore`] | `postgres` (default) | PostgreSQL: several replicas sharing one database |
//! | [`SqliteStore`] | `sqlite` (default, SQLite bundled) | SQLite: one server, or processes on one machine |
//! | `MariaDbStore` | `mariadb` | MariaDB 10.6 or later, shared by several replicas. MySQL is not supported: the statements need `INSERT … RETURNING`, which only MariaDB has |
//!
//! All three are one engine, [`SqlStore`], over a [`Dialect`](dialect::Dialect) that supplies
//! the database's SQL.
//!
//! The layer remembers each event it processed in a table that keeps the provider's
//! documented schema (`event_id VARCHAR(50) PRIMARY KEY, event_type VARCHAR(100) NOT NULL,
//! processed_at TIMESTAMP` with an index on `processed_at`) and adds what a correct state
//! machine needs: `state` (`in_flight` or `completed`), `claim_token` (the owner of a record)
//! and `expires_at` (the lease of a claim in flight, the retention of a completed event).
//!
//! - **Claim** in one statement: `INSERT … ON CONFLICT (event_id) DO UPDATE … WHERE <expired>
//!   RETURNING …`. No check-then-insert race: among any number of concurrent deliveries of
//!   one event, across any number of servers sharing the database, exactly one runs the
//!   handler.
//! - **Renew**, **complete** and **release**: one statement each, checked against the owner's
//!   token, so a delivery whose claim was taken over changes nothing.
//! - **Migrations**: [`SqlStore::migrate`] from code, or the same schema as plain SQL in the
//!   crate's `migrations/` (`postgres.sql`, `sqlite.sql`, `mariadb.sql`).
//! - **Purge**: [`SqlStore::purge`] deletes the rows past their own expiry (completed events,
//!   abandoned claims; never a live record), in short batches that never hold up a claim;
//!   [`PurgeTask`] runs it on an interval; [`SqlStore::cron_purge_sql`] is the plain SQL for
//!   cron, time-zone safe.
//! - **Durable by default**: claims, renewals and completions wait for the database's disk
//!   flush; see [`PostgresStore`]'s `with_asynchronous_claims` for the opt-out and its price.
//! - **Group commit** ([`GroupCommit`], SQLite's and PostgreSQL's default; MariaDB's for every
//!   write but today's mode's claims, opt-in for those):
//!   concurrent writes are committed together, one flush for a whole group, and each caller is
//!   answered once its own write is durable, with the answer its statement gives on its own;
//!   see [`SqlStore::with_group_commit`].
//! - **Bounded lock waits**: a claim, a renewal or (PostgreSQL) an inbox receipt that waits
//!   for a lock held by another transaction gives up after the store's lock timeout, 2 s by
//!   default ([`SqlStore::LOCK_TIMEOUT`]; PostgreSQL `lock_timeout` and MariaDB
//!   `innodb_lock_wait_timeout` set in the statement itself, SQLite the busy timeout), and the
//!   layer answers 503. It must stay below the layer's store timeout (5 s by default, minus
//!   the pool's 3 s acquire timeout): a claim the layer gave up on while it still waited would
//!   otherwise land after the layer released it, and block the event with 409 for a whole
//!   lease. See [Lock waits](SqlStore#lock-waits).
//!
//! ```
//! use std::time::Duration;
//! use sangho_webhook::{
//!     SanghoWebhookLayer,
//!     signature::Secret,
//!     store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Renewal},
//! };
//! use sangho_webhook_sqlx::SqliteStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let url = format!("sqlite://{}", dir.path().join("webhooks.db").display());
//! // `PostgresStore::connect("postgres://user@host/db")` works the same way.
//! let store = SqliteStore::connect(&url).await?; // e.g. "sqlite://sangho-webhooks.db"
//! store.migrate().await?;
//! let purge = store.spawn_purge(Duration::from_secs(72 * 3600), Duration::from_secs(3600));
//!
//! let (lease, retention) = (Duration::from_secs(30), Duration::from_secs(72 * 3600));
//! let (token, other) = (ClaimToken::generate(), ClaimToken::generate());
//! let who = |token| Claimant::new("evt_1", "charge.succeeded", token);
//! assert_eq!(store.claim(who(&token), lease).await?, Claim::Acquired);
//! assert_eq!(store.claim(who(&other), lease).await?, Claim::InFlight);
//! assert_eq!(store.renew(who(&token), lease).await?, Renewal::Held);
//! assert_eq!(store.complete(who(&token), retention).await?, Completion::Recorded);
//! assert_eq!(store.claim(who(&other), lease).await?, Claim::Completed);
//!
//! // What a server does with it: the layer claims, completes and releases by itself.
//! let layer = SanghoWebhookLayer::new(Secret::new("whsec_…")?, store);
//! # drop(layer);
//! purge.stop().await;
//! # Ok(()) }
//! ```
//!
//! Build pools with the re-exported [`sqlx`], so that they match this crate's version.

// The other lints are the workspace's (the root Cargo.toml); this one is for the library's
// API only, so it is set here rather than for every target of the package.
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a database feature the crate has no store, and its helpers no caller.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mariadb")),
    allow(dead_code)
)]

pub mod dialect;
mod error;
mod group_commit;
mod inbox;
mod plans;
mod purge;
mod queries;
mod store;
mod table;
mod transaction;
mod turns;

pub use error::Error;
pub use group_commit::{GroupCommit, GroupCommitFailed};
pub use purge::{Purge, PurgeTask};
pub use sqlx;
pub use store::SqlStore;
pub use table::TableName;
pub use transaction::{CompleteInError, HeldCompletion};

/// The idempotency store over PostgreSQL (feature `postgres`): durable, and shared by every
/// replica that uses the same database. See [`SqlStore`] for how it works, and the
/// [`connect`](SqlStore::<dialect::Postgres>::connect),
/// [`with_asynchronous_claims`](SqlStore::<dialect::Postgres>::with_asynchronous_claims) and
/// [`with_lock_timeout`](SqlStore::<dialect::Postgres>::with_lock_timeout) of this dialect.
///
/// ```no_run
/// use std::time::Duration;
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret};
/// use sangho_webhook_sqlx::PostgresStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
/// store.migrate().await?;
/// let purge = store.spawn_purge(Duration::from_secs(72 * 3600), Duration::from_secs(3600));
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_…")?, store);
/// // … serve with the layer; on shutdown:
/// purge.stop().await;
/// # Ok(()) }
/// ```
#[cfg(feature = "postgres")]
pub type PostgresStore = SqlStore<dialect::Postgres>;

/// The idempotency store over SQLite (feature `sqlite`): durable and embedded, for one server
/// (or several processes on one machine sharing the database file). See [`SqlStore`] for how
/// it works.
///
/// SQLite runs one writer at a time, so a claim is atomic. The database should be in WAL mode
/// (readers never wait for the writer) and every connection should have a busy timeout (a
/// writer waits for the previous one instead of failing with `database is locked`):
/// [`connect`](SqlStore::<dialect::Sqlite>::connect) sets both,
/// [`migrate`](SqlStore::migrate) switches the file to WAL, and a pool you build yourself
/// needs a busy timeout. The busy timeout is also the store's bound on lock waits (see
/// [Lock waits](SqlStore#lock-waits)): keep it below the layer's store timeout minus the
/// pool's acquire timeout; sqlx's default of 5 seconds is too long, `connect` sets
/// [`BUSY_TIMEOUT`](SqlStore::<dialect::Sqlite>::BUSY_TIMEOUT), 2 seconds. Times come from
/// SQLite's clock (this machine's).
///
/// ```
/// use std::time::Duration;
/// use sangho_webhook_sqlx::{
///     SqliteStore,
///     sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
/// };
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("webhooks.db");
/// let options = SqliteConnectOptions::new()
///     .filename(path)
///     .create_if_missing(true)
///     .journal_mode(SqliteJournalMode::Wal)
///     .busy_timeout(Duration::from_secs(2));
/// let pool = SqlitePoolOptions::new()
///     .acquire_timeout(Duration::from_secs(3))
///     .connect_with(options)
///     .await?;
/// let store = SqliteStore::new(pool).with_table_name("shop_webhook_events")?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "sqlite")]
pub type SqliteStore = SqlStore<dialect::Sqlite>;

/// The idempotency store over MariaDB 10.6 or later (feature `mariadb`): durable, and shared by
/// every replica that uses the same database; also an [`Inbox`](sangho_webhook::inbox::Inbox)
/// for inbox mode, in the same table. See [`SqlStore`] for how it works, and the
/// [`connect`](SqlStore::<dialect::MariaDb>::connect) and
/// [`with_lock_timeout`](SqlStore::<dialect::MariaDb>::with_lock_timeout) of this dialect.
/// MySQL is not supported: the statements need `INSERT … RETURNING`, which only MariaDB has.
///
/// `event_id` is ASCII compared byte for byte (event ids are case-sensitive); every time is
/// the server's `UTC_TIMESTAMP(6)`, whatever its time zone.
///
/// # The server
///
/// [`migrate`](SqlStore::migrate) refuses a server older than MariaDB 10.6 with
/// [`Error::UnsupportedServer`], naming the version it found: inbox mode's workers take events
/// with `SELECT … FOR UPDATE SKIP LOCKED`, which 10.6 introduced.
///
/// It also checks that a commit is durable once it answers: `innodb_flush_log_at_trx_commit`
/// must be `1` (InnoDB's default), and with the binary log on, `sync_binlog` must be `1` too.
/// With any other value a crash of the server can lose the last commits before it: an inbox
/// receipt the provider was told was stored, or a claim or a completion. `migrate` then logs
/// an error naming the setting and its value, and goes on (the direct mode still works, with
/// that risk); set both to `1` before you rely on inbox mode. An acknowledged receipt survives
/// a failover to a replica only with semi-synchronous replication; with asynchronous
/// replication the last receipts before a failover can be lost.
///
/// # Inbox mode
///
/// Receipts are one statement each (`INSERT … ON DUPLICATE KEY UPDATE … RETURNING`), committed
/// on their own. MariaDB has no `UPDATE … RETURNING`, so a take, a renewal, a completion, a
/// failure, an abandon and a replay each run as one short transaction at READ COMMITTED: the
/// event's row is locked (`SELECT … FOR UPDATE`; for a take `SKIP LOCKED`, so that concurrent
/// workers pass over each other's rows, and the locking read answers the taken event), then
/// updated. A transaction InnoDB aborts on a deadlock changed nothing and is run again, up to
/// three times. The workers poll (no notifications between processes on MariaDB).
///
/// A receipt or a replay of an event with an ordering key holds the key's lock meanwhile, so
/// that the events of one key commit in the order of their sequence numbers: a named lock
/// (`GET_LOCK`, its name `sangho_key_` and a SHA-1 of the database, the table and the key),
/// released once the receipt has committed. Receipts of other keys, or without a key, never
/// wait for it; a receipt that waits for its key's lock longer than the lock timeout fails
/// (503, the provider delivers the event again).
///
/// ```no_run
/// use std::time::Duration;
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret};
/// use sangho_webhook_sqlx::MariaDbStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MariaDbStore::connect("mysql://root@127.0.0.1:3306/app").await?;
/// store.migrate().await?;
/// let purge = store.spawn_purge(Duration::from_secs(72 * 3600), Duration::from_secs(3600));
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_…")?, store);
/// // … serve with the layer; on shutdown:
/// purge.stop().await;
/// # Ok(()) }
/// ```
#[cfg(feature = "mariadb")]
pub type MariaDbStore = SqlStore<dialect::MariaDb>;

#[cfg(test)]
mod tests {
    #[test]
    fn the_readme_shows_every_dialect_s_cron_purge() {
        fn cron_purge<D: crate::dialect::Dialect>() -> String {
            let table = crate::TableName::default();
            crate::queries::Queries::new::<D>(&table, true, std::time::Duration::from_secs(2))
                .cron_purge
        }
        let readme = include_str!("../README.md");
        #[cfg(feature = "postgres")]
        assert!(readme.contains(cron_purge::<crate::dialect::Postgres>().trim_end_matches(';')));
        #[cfg(feature = "sqlite")]
        assert!(readme.contains(cron_purge::<crate::dialect::Sqlite>().trim_end_matches(';')));
        #[cfg(feature = "mariadb")]
        assert!(readme.contains(cron_purge::<crate::dialect::MariaDb>().trim_end_matches(';')));
    }
}

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
