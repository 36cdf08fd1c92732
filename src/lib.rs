//! Receive [Sangho] payment webhooks correctly, in any tower-based server (axum, hyper, tonic).
//!
//! Sangho delivers each event *at least once*: the same event can arrive several times, even
//! at the same moment. [`SanghoWebhookLayer`] makes a handler see each event once. Cheap
//! checks come first, and nothing untrusted is buffered or hashed without a bound:
//!
//! 1. a declared `Content-Length` over the body limit: 413, without reading the body;
//! 2. the `Sangho-Signature` header is parsed (at most 8 `v1` entries) and its timestamp
//!    checked against the tolerance, before the body is read: 400 otherwise;
//! 3. the body is buffered under the limit (413 over it);
//! 4. the signature is verified against the raw bytes, against one or more secrets (400);
//! 5. the event is parsed (400 when it is not one) and a [`SanghoEvent`] goes into the request
//!    extensions; a `Sangho-Event-ID` header that differs from the signed id is refused (400);
//! 6. the event is claimed in an [`IdempotencyStore`](store::IdempotencyStore) under a fresh
//!    token: a completed event is acknowledged as a duplicate (200) without calling the
//!    handler, an event being processed by another delivery is answered 409 with
//!    `Retry-After`, and a store failure 503 with `Retry-After` (fail closed: the provider
//!    retries);
//! 7. the handler is called with the body unchanged, while the claim is renewed every third of
//!    the lease;
//! 8. a 2xx answer completes the event (retried in the background if the store fails);
//!    anything else (an error, a panic, a dropped connection) releases it, so that the next
//!    delivery processes it.
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
//! let app: Router = Router::new().route("/webhooks/sangho", post(handle).layer(webhooks));
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
//! - Settings that cannot work are refused when the layer is built ([`ConfigError`]).
//! - The store calls run on tokio's timer: the layer needs a tokio runtime with time enabled.
//!
//! # Deployment caveat
//!
//! [`MokaStore`](store::MokaStore) remembers events in this process only: it is emptied by a
//! restart and not shared between replicas. Use a shared, durable store in production
//! (`sangho-webhook-sqlx`, `sangho-webhook-redis`).
//!
//! [Sangho]: https://example.com/sangho

#![deny(missing_docs)]
#![forbid(unsafe_code)]
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
mod layer;
mod outcome;
mod rejection;
mod service;
pub mod signature;
pub mod store;
#[cfg(feature = "test-util")]
pub mod testing;

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

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
