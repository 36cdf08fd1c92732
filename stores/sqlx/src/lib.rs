//! SQL idempotency stores for [`sangho_webhook`]: [`PostgresStore`] (feature `postgres`) and
//! [`SqliteStore`] (feature `sqlite`), both on by default, and `MariaDbStore` (feature `mysql`,
//! MariaDB 10.5 or later).
//!
//! The layer remembers each event it processed in a table that keeps the seed's schema
//! (`event_id VARCHAR(50) PRIMARY KEY, event_type VARCHAR(100) NOT NULL, processed_at
//! TIMESTAMP` with an index on `processed_at`) and adds what a correct state machine needs:
//! `state` (`in_flight` or `completed`), `claim_token` (the owner of a claim) and `expires_at`
//! (the lease of a claim in flight, the retention of a completed event).
//!
//! - **Claim** in one statement, one round trip: `INSERT … ON CONFLICT (event_id) DO UPDATE …
//!   WHERE <expired> RETURNING …`. No check-then-insert race: among any number of concurrent
//!   deliveries of one event, across any number of servers sharing the database, exactly one
//!   runs the handler.
//! - **Complete** and **release**: one `UPDATE` / `DELETE` each, checked against the owner's
//!   token, so a delivery whose claim was taken over changes nothing.
//! - **Migrations**: [`PostgresStore::migrate`] / [`SqliteStore::migrate`] from code, or the
//!   same schema as plain SQL in the crate's `migrations/` (`postgres.sql`, `sqlite.sql`).
//! - **Purge**: [`PostgresStore::purge`] / [`SqliteStore::purge`] delete the rows older than
//!   the retention (completed events, abandoned claims; never a live claim) through the
//!   `processed_at` index; [`PurgeTask`] runs it on an interval; the docs of `purge` give the
//!   plain SQL for cron.
//!
//! ```
//! use std::time::Duration;
//! use sangho_webhook::{
//!     SanghoWebhookLayer,
//!     signature::Secret,
//!     store::{Claim, ClaimToken, IdempotencyStore},
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
//! let claim = |token| store.claim("evt_1", "charge.succeeded", token, lease);
//! assert_eq!(claim(&token).await?, Claim::Acquired);
//! assert_eq!(claim(&other).await?, Claim::InFlight);
//! assert!(store.renew("evt_1", "charge.succeeded", &token, lease).await?);
//! assert!(store.complete("evt_1", "charge.succeeded", &token, retention).await?);
//! assert_eq!(claim(&other).await?, Claim::Completed);
//!
//! // What a server does with it: the layer claims, completes and releases by itself.
//! let layer = SanghoWebhookLayer::new(Secret::new("whsec_…")?, store);
//! # drop(layer);
//! purge.stop().await;
//! # Ok(()) }
//! ```
//!
//! Build pools with the re-exported [`sqlx`], so that they match this crate's version.

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a database feature the crate has no store, and its helpers no caller.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code)
)]

mod claim;
mod error;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod purge;
#[cfg(feature = "sqlite")]
mod sqlite;
mod table;

pub use error::Error;
#[cfg(feature = "mysql")]
pub use mysql::MariaDbStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use purge::{Purge, PurgeTask};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use sqlx;
pub use table::TableName;

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
