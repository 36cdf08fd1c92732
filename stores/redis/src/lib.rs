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
//! let webhooks = SanghoWebhookLayer::new(secret, store);
//! let app: Router = Router::new().route("/webhooks/sangho", post(|| async { "ok" })).route_layer(webhooks);
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
//! key's slot: the store works on Redis Cluster. Connect with
//! [`RedisStore::connect_cluster`] (feature `cluster`, on by default), or build the store with
//! [`RedisStore::new`] over any connection that implements [`redis::aio::ConnectionLike`] and
//! `Clone`. The cluster connection follows `MOVED` and `ASK` redirections and refreshes its
//! slot map after a failover; the [`HealingConnection`] around it builds it again after a
//! response timeout (a half-open connection to a node), and bounds each request, retries
//! included, to two response timeouts. [`with_replica_wait`](RedisStore::with_replica_wait)
//! works there too: `WAIT` runs on the primary that owns the event's key, in the same
//! pipeline as the write. Keep `{hash tags}` out of the prefix, or every event lands on one
//! node.
//!
//! ## Requirements
//!
//! Redis 7.0 or later (`SET` with both `NX` and `GET`), or a compatible server such as Valkey
//! 7.2 or later, with Lua scripting allowed. An older Redis refuses the claim
//! (`ERR syntax error`), and the layer answers every delivery 503.
//!
//! # Eviction
//!
//! Every key this store writes has a time to live (the lease, or the retention). A server
//! whose `maxmemory-policy` is `allkeys-*` or `volatile-*` may therefore evict any of them when
//! it reaches its `maxmemory`, silently: an evicted in-flight claim lets a concurrent delivery
//! run the handler a second time, and an evicted completed event is processed again when
//! redelivered. [`RedisStore::connect`] reads the policy (`CONFIG GET maxmemory-policy`; on a
//! cluster, of every primary) and refuses such a server with
//! [`ConnectError::EvictingPolicy`]. Set `maxmemory-policy noeviction`: a full server then
//! refuses writes, the layer answers 503, and nothing is lost. To accept an evicting server
//! anyway (it never reaches its `maxmemory`, or doubles are acceptable), use
//! [`ConnectOptions::allow_evicting_policy`]. A server that does not let the client run
//! `CONFIG` (many managed services) is accepted with a warning.
//!
//! # When Redis is down, hangs, or fails over
//!
//! [`RedisStore::connect`] sets a connection timeout and a response timeout (see
//! [`RedisStore::manager_config`]), so an operation on a dead or unreachable server fails with
//! [`StoreError::Backend`](sangho_webhook::store::StoreError::Backend) (the
//! [`redis::RedisError`] kept as its source) in bounded time, never hangs; the layer then
//! answers `503` with `Retry-After` and the provider redelivers later. The layer's own store
//! timeout (`SanghoWebhookLayerBuilder::with_store_timeout`) bounds every operation in any
//! case.
//!
//! The store's [`HealingConnection`] reconnects:
//!
//! - when the connection is **closed or reset** (Redis restarted, a proxy closed it);
//! - after a **response timeout**: the connection may be half-open (a frozen load balancer, a
//!   dead network path) while a new one would work, so it is dropped and the next command
//!   connects again;
//! - after a **`READONLY`** (or `MASTERDOWN`) reply: the server was demoted to a replica in a
//!   failover. The next command connects to the configured address again, which reaches the
//!   new primary when that address follows failovers (a DNS name, a virtual IP, a proxy, a
//!   Kubernetes service). The store does not ask Redis Sentinel for the primary itself: point
//!   it at an address that follows the primary, or use Redis Cluster.
//!
//! So a connection that stopped working costs at most one response timeout of failed
//! operations (503s): measured on loopback with a 500 ms response timeout, deliveries were
//! processed again 0.6 s after a proxy froze the connection (1.1 s on a cluster), and 0.1 s
//! after a failover.
//!
//! A command that timed out may still have run on the server (it was sent; only the answer is
//! missing). The layer releases such a claim in the background with its token, so the event
//! is not refused for a whole lease; if the release cannot run either, the claim expires with
//! its lease and the event is then taken over. Nothing is lost.
//!
//! # Durability
//!
//! Redis acknowledges a write once it is in the primary's memory. Two windows remain in which
//! an acknowledged claim or completion can vanish:
//!
//! - **Replication is asynchronous.** A failover promotes a replica that may not have
//!   received the last writes: a completion lost this way lets a redelivery process the event
//!   again; a claim lost this way lets a concurrent redelivery run the handler while the first
//!   still runs. With [`RedisStore::with_replica_wait`], every claim, renewal and completion is
//!   followed, in the same round trip, by `WAIT <replicas> <timeout>`, and fails unless that
//!   many replicas acknowledged it: a claim is then released and answered 503, a completion is
//!   retried by the layer (with the same token, so it lands on whichever server is primary by
//!   then). `WAIT` does not make Redis strongly consistent (a failover can still pick a
//!   replica that missed a write, when several replicas exist and fewer than all were waited
//!   for; Redis Sentinel and Cluster prefer the most up-to-date replica), but it closes the
//!   common window.
//! - **Persistence is periodic.** Without persistence, a restart of Redis forgets every
//!   event, and their redeliveries are processed again. With the append-only file and
//!   `appendfsync everysec` (Redis's default for AOF), a crash of the machine (not only of the
//!   process) can lose up to the last second of writes; `appendfsync always` loses none, at
//!   the cost of one `fsync` per write. RDB snapshots alone lose everything since the last
//!   snapshot. Redis 7.2 adds `WAITAOF` for waiting on the fsync; this store does not send it.
//!
//! For exactly-once processing across a failover, run replicas and use
//! [`with_replica_wait`](RedisStore::with_replica_wait); across a restart of a lone server,
//! use the append-only file with `appendfsync always`.

// The other lints are the workspace's (the root Cargo.toml); this one is for the library's
// API only, so it is set here rather than for every target of the package.
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
mod connection;
mod durability;
mod scripts;
mod store;

pub use connect::{ConnectError, ConnectOptions};
pub use connection::HealingConnection;
pub use durability::ReplicationError;
pub use redis;
pub use store::RedisStore;

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
