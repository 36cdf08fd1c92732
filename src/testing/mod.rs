//! The test kit (feature `test-util`): fixtures, a signed-request builder, and the
//! conformance suite every [`IdempotencyStore`](crate::store::IdempotencyStore) must pass.
//!
//! ```
//! use sangho_webhook::{signature::Secret, testing::{Delivery, fixtures}};
//!
//! let secret = Secret::new(fixtures::SECRET).unwrap();
//! let request = Delivery::event("evt_1", "payment_intent.succeeded")
//!     .signed(&secret, fixtures::NOW)
//!     .into_request();
//! assert!(request.headers().contains_key("sangho-signature"));
//! ```

pub mod conformance;
mod delivery;
pub mod fixtures;
mod handler;
pub mod inbox_conformance;
mod model;
mod null_store;
mod send;

pub use delivery::Delivery;
pub use handler::CountingHandler;
pub use null_store::NullStore;
pub use send::{Answer, send};
