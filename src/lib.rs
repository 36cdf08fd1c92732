//! Receive [Sangho] payment webhooks correctly, in any tower-based server (axum, hyper, tonic).
//!
//! Sangho delivers each event *at least once*: the same event can arrive several times, even
//! at the same moment. [`SanghoWebhookLayer`] makes a handler see each event once:
//!
//! 1. it buffers the body under a limit (413 over it);
//! 2. it verifies the `Sangho-Signature` HMAC-SHA256 header against the raw bytes, within a
//!    timestamp tolerance, against one or more secrets (400 otherwise);
//! 3. it parses the event (400 when it is not one) and puts a [`SanghoEvent`] into the request
//!    extensions;
//! 4. it refuses a `Sangho-Event-ID` header that differs from the signed body's id (400);
//! 5. it claims the event in an [`IdempotencyStore`](store::IdempotencyStore): a completed
//!    event is acknowledged as a duplicate (200) without calling the handler, an event being
//!    processed by another delivery is answered 409 with `Retry-After`, and a store failure is
//!    answered 503 with `Retry-After` (fail closed: the provider retries);
//! 6. it calls the handler, with the body unchanged;
//! 7. a 2xx answer completes the event; anything else (an error, a panic, a dropped connection)
//!    releases it, so that the next delivery processes it.
//!
//! ```
//! use axum::{Extension, Json, Router, routing::post};
//! use sangho_webhook::{SanghoEvent, SanghoWebhookLayer, signature::Secret, store::MokaStore};
//! use serde_json::{Value, json};
//!
//! async fn handle(Extension(event): Extension<SanghoEvent>) -> Json<Value> {
//!     tracing::info!(id = event.id(), kind = event.event_type(), "processing");
//!     Json(json!({ "received": true }))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let secret = Secret::new(std::env::var("SANGHO_WEBHOOK_SECRET").unwrap_or("whsec_dev".into()))?;
//! let app: Router = Router::new()
//!     .route("/webhooks/sangho", post(handle))
//!     .layer(SanghoWebhookLayer::new(secret, MokaStore::new()));
//! # let _ = app;
//! // axum::serve(tokio::net::TcpListener::bind("127.0.0.1:3000").await?, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Decisions where the contract is silent
//!
//! - Several `Sangho-Signature` headers on one request are refused as malformed (400), rather
//!   than choosing one.
//! - Spaces around the header's comma-separated entries are tolerated; an entry without `=` is
//!   malformed.
//! - The timestamp check runs before the HMAC, so a stale replay costs no hashing.
//! - An unreadable body (the client went away mid-upload) is answered 400 `body_unreadable`.
//! - A completion that finds its claim taken over (the handler outlived its lease) is logged at
//!   `warn`; the handler's response is still returned.
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
pub mod event;
mod future;
mod layer;
mod rejection;
mod service;
pub mod signature;
pub mod store;
#[cfg(feature = "test-util")]
pub mod testing;

pub use body::ResponseBody;
pub use event::SanghoEvent;
pub use future::ResponseFuture;
pub use layer::SanghoWebhookLayer;
pub use rejection::{Rejection, RejectionKind};
pub use service::{EVENT_ID_HEADER, SIGNATURE_HEADER, SanghoWebhook};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
