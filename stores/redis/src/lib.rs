//! A Redis [`IdempotencyStore`](sangho_webhook::store::IdempotencyStore) for the
//! [`sangho-webhook`](sangho_webhook) tower layer: [`RedisStore`].
//!
//! Every replica of a server pointed at one Redis shares what it has processed, so an event
//! delivered to several replicas at once runs its handler once, and a completed event is still
//! recognised after a restart or a deploy.
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use sangho_webhook::{SanghoWebhookLayer, signature::Secret};
//! use sangho_webhook_redis::RedisStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
//! let secret = Secret::new(std::env::var("SANGHO_WEBHOOK_SECRET")?)?;
//! let app: Router = Router::new()
//!     .route("/webhooks/sangho", post(|| async { "ok" }))
//!     .layer(SanghoWebhookLayer::new(secret, store));
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! # How events are kept
//!
//! Each event is one Redis string, `<prefix><event id>` (the prefix defaults to
//! `sangho:webhook:`):
//!
//! | state | value | expires after |
//! | --- | --- | --- |
//! | in flight | the owner's [`ClaimToken`](sangho_webhook::store::ClaimToken) (32 hex digits) | the lease |
//! | completed | `completed:` followed by the token that completed it | the retention (72 h by default in the layer) |
//!
//! - **claim** is one command, `SET <key> <token> NX PX <lease> GET`: it stores the new
//!   owner's token only if the key is absent, and answers what the key held, in the same round
//!   trip: nothing (acquired), `completed:…` (completed), or another owner's token (in
//!   flight). Redis runs each command atomically, so among any number of concurrent claims
//!   (from any number of processes) exactly one acquires the event. An owner that crashed
//!   leaves a key that expires with its lease, and the next delivery takes the event over.
//! - **renew** is a script: when the key holds the token, `PEXPIRE <key> <lease>`; when the
//!   key is gone (its lease ran out, nobody took the event over), `SET <key> <token> PX
//!   <lease>` again; when the token completed the event, nothing. Another owner's value is
//!   left alone, and the answer is `false`.
//! - **complete** is a script that, unless the key holds another owner's token or another
//!   token's completion, sets `completed:<token>` for the retention. So a completion still
//!   succeeds after the owner's lease expired (as long as nobody took the event over), and a
//!   repeated completion by the same token succeeds.
//! - **release** is a script that compares the token and, only if it is equal, `DEL`s the key.
//!   A stale owner (its lease expired, the event was taken over or completed) changes nothing.
//!
//! Completed keys expire by themselves after the retention: there is no purge task to run.
//! The three scripts are sent with `EVALSHA` (loaded on first use, and again after a server
//! restart).
//!
//! The event type is not stored: the key and its state are all the layer needs.
//!
//! ## Redis Cluster
//!
//! Every operation (the claim command, each script) reads and writes exactly one key, the
//! event's (passed in `KEYS` to the scripts), so it is routed to the one node that owns that
//! key's slot: the store works on Redis Cluster. Build it with [`RedisStore::new`] over a
//! cluster connection (enable the `cluster-async` feature of the re-exported [`redis`]
//! crate), or over any other connection that implements [`redis::aio::ConnectionLike`] and
//! `Clone`. (The tests here run against a single server.)
//!
//! ## Requirements
//!
//! Redis 7.0 or later (`SET` with both `NX` and `GET`), or a compatible server such as Valkey
//! 7.2 or later, with Lua scripting allowed. An older Redis refuses the claim
//! (`ERR syntax error`), and the layer answers every delivery 503.
//!
//! Run Redis with persistence (AOF, or RDB snapshots) if completed events must survive a
//! restart of Redis itself: without it, a Redis restart forgets every event, and their
//! redeliveries are processed again. Give it a `maxmemory-policy` that does not evict these
//! keys (`noeviction`, or `volatile-*` only if nothing else with a TTL shares the server):
//! an evicted completed event is processed again if redelivered.
//!
//! # When Redis is down
//!
//! [`RedisStore::connect`] sets a connection timeout and a response timeout (see
//! [`RedisStore::manager_config`]), so an operation on a dead or unreachable server fails with
//! [`StoreError::Backend`](sangho_webhook::store::StoreError::Backend) (the
//! [`redis::RedisError`] kept as its source) in bounded time, never hangs; the layer then
//! answers `503` with `Retry-After` and the provider redelivers later. The
//! [`ConnectionManager`](redis::aio::ConnectionManager) reconnects, and deliveries are
//! processed again as soon as Redis is back, without restarting the server. The layer's own
//! store timeout
//! ([`with_store_timeout`](sangho_webhook::SanghoWebhookLayer::with_store_timeout)) bounds
//! every operation in any case.
//!
//! A command that timed out may still have run on the server (it was sent; only the answer is
//! missing). For a claim, the event is then in flight with an owner that never comes: it is
//! answered 409 until the lease expires, and then taken over. Nothing is lost, the event is
//! only late by at most one lease.

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod scripts;
mod store;

pub use redis;
pub use store::RedisStore;

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
