//! Receive [Sangho] payment webhooks correctly, in any tower-based server (axum, hyper, tonic).
//!
//! Sangho delivers each event *at least once*: the same event can arrive several times, even
//! at the same moment. [`SanghoWebhookLayer`] makes a handler see each event once, in four
//! stages. Cheap checks come first, and nothing untrusted is buffered or hashed without a
//! bound.
//!
//! **Verify**, with nothing written:
//!
//! - a declared `Content-Length` over the body limit: 413, without reading the body;
//! - the `Sangho-Signature` header is parsed (at most 8 `v1` entries) and its timestamp
//!   checked against the tolerance, before the body is read: 400 otherwise;
//! - the body is buffered under the limit (413 over it);
//! - the signature is verified against the raw bytes, against one or more secrets (400);
//! - the event is parsed (400 when it is not one), and a `Sangho-Event-ID` header that
//!   differs from the signed id is refused (400).
//!
//! **Claim**: the event is claimed in an [`IdempotencyStore`](store::IdempotencyStore) under
//! a fresh token. A completed event is acknowledged as a duplicate (200) without calling the
//! handler, an event being processed by another delivery is answered 409 with `Retry-After`,
//! and a store failure 503 with `Retry-After` (fail closed: the provider retries).
//!
//! **Handle**: the handler is called with the [`SanghoEvent`] in the request extensions and
//! the body unchanged, while the layer's renewer, a task of its own, renews the claim every
//! third of the lease.
//!
//! **Settle**: a 2xx answer completes the event (retried in the background if the store
//! fails); anything else (an error, a non-2xx, a panic, answered 500) releases it, so that the
//! next delivery processes it.
//!
//! # The handler finishes what it started
//!
//! The handler's run does not depend on the provider's connection. When the provider hangs up
//! (its own timeout), the handler runs to its end, its claim still renewed, and its answer
//! completes or releases the event as usual; a redelivery meanwhile gets 409, one after it a
//! duplicate. Cancelling a handler partway through its work is what makes a payment run twice,
//! and the provider's hang-up says nothing about the event, so the layer never does it. A
//! handler that must not outlive its caller has no place behind this layer: do the work that
//! needs the caller elsewhere, and keep the handler to what must happen once per event.
//!
//! The renewals run in another task than the handler's, so on a multi-threaded runtime a
//! handler that blocks its thread (a synchronous client, CPU work) is still renewed. On a
//! current-thread runtime they share the one thread: keep blocking work in
//! `tokio::task::spawn_blocking` there.
//!
//! At shutdown, [`SanghoWebhookLayer::drain`] waits for the handlers still running and the
//! settlements still owed (completion retries, releases), up to a deadline.
//!
//! ```
//! use axum::{Json, Router, routing::post};
//! use sangho_webhook::{SanghoEvent, SanghoWebhookLayer, signature::Secret, store::MokaStore};
//! use serde_json::{Value, json};
//!
//! // `SanghoEvent` is an axum extractor with the `axum` feature.
//! async fn handle(event: SanghoEvent) -> Json<Value> {
//!     tracing::info!(id = event.id(), kind = event.event_type(), "processing");
//!     Json(json!({ "received": true }))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let secret = Secret::new(std::env::var("SANGHO_WEBHOOK_SECRET").unwrap_or("whsec_dev".into()))?;
//! let webhooks = SanghoWebhookLayer::new(secret, MokaStore::new());
//! // On the webhook route only: other routes and unknown paths are left alone.
//! let app: Router = Router::new().route("/webhooks/sangho", post(handle)).route_layer(webhooks);
//! # let _ = app;
//! // axum::serve(tokio::net::TcpListener::bind("127.0.0.1:3000").await?, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Decisions
//!
//! - Several `Sangho-Signature` headers on one request are refused as malformed (400), rather
//!   than choosing one. Spaces around the header's comma-separated entries are tolerated; an
//!   entry without `=` is malformed.
//! - The timestamp is checked before the body is read and hashed, so a stale replay costs
//!   neither.
//! - An unreadable body (the client went away mid-upload) is answered 400 `body_unreadable`.
//! - Only a string `id` and `type` are required of an event. Optional fields of another type
//!   read as absent, because a signed event refused for them would be refused on every
//!   redelivery and lost. A duplicate `id` or `type` key is refused: another parser could read
//!   the other value.
//! - A claim that times out, or whose delivery is dropped while claiming, is released in the
//!   background with the delivery's token: the store may have applied it.
//! - A handler still running after the maximum processing time (10 min by default) is logged
//!   at `error`, and its claim is no longer renewed: a hung handler must not hold its event at
//!   409 until the provider gives up. A redelivery after the lease may then process it again.
//! - A completion that fails is retried in the background for 5 minutes by default, the claim
//!   still renewed (redeliveries get 409 meanwhile). If it still fails, the handler already
//!   ran: the event may be processed again on redelivery, which is logged at `error`.
//! - Settings that cannot work are refused when the layer is built ([`ConfigError`]), and so
//!   are settings that would let one delivery hold its event past the provider's 48 hours:
//!   the lease is at most 1 h, the maximum processing time 12 h, the completion retries 1 h.
//!   Every other duration is honoured, however long.
//! - A claim that the store answers late is finished in the background and released only then,
//!   and a renewal under way when the handler answers lands before the settlement: neither
//!   can re-create a claim after its own release.
//! - The store calls run on tokio's timer: the layer needs a tokio runtime with time enabled.
//!
//! # The windows that remain
//!
//! What can still process an event twice, each with its mitigation (RELIABILITY.md has the
//! whole table): a handler past the maximum processing time; a store outage longer than the
//! lease while a handler runs (the first renewal after it records a fresh lease, within a
//! second); a store slower than the lease; a forward step of the store's clock (the database
//! server's for PostgreSQL and MariaDB, the application host's for SQLite, the Redis host's):
//! run NTP with slewing; a failover to an asynchronous PostgreSQL standby or MariaDB replica,
//! which can miss the last claims and completions (use `synchronous_standby_names` with
//! `synchronous_commit = on`, or MariaDB's semi-synchronous replication); a process killed
//! between the handler's effects and the completion (use the SQL stores' `complete_in`); and a
//! shutdown that does not [`drain`](SanghoWebhookLayer::drain).
//!
//! # Deployment caveat
//!
//! [`MokaStore`](store::MokaStore) remembers events in this process only: it is emptied by a
//! restart and not shared between replicas. Use a shared, durable store in production
//! (`sangho-webhook-sqlx`, `sangho-webhook-redis`).
//!
//! [Sangho]: https://example.com/sangho

// The other lints are the workspace's (the root Cargo.toml); this one is for the library's
// API only, so it is set here rather than for every target of the package.
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod drain;
mod error_chain;
pub mod event;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod extract;
mod future;
mod guard;
pub mod inbox;
mod layer;
mod outcome;
mod rejection;
mod renewal;
mod service;
pub mod signature;
pub mod store;
#[cfg(feature = "test-util")]
pub mod testing;
mod verify;

pub use body::{ResponseBody, WebhookBody};
pub use drain::Drained;
pub use event::{CompletionHold, DeliveryClaim, SanghoEvent};
#[cfg(feature = "axum")]
pub use extract::Event;
pub use future::ResponseFuture;
pub use layer::{ConfigError, SanghoWebhookLayer, SanghoWebhookLayerBuilder};
pub use outcome::Outcome;
pub use rejection::{Rejection, RejectionKind};
pub use service::{EVENT_ID_HEADER, SIGNATURE_HEADER, SanghoWebhook};
