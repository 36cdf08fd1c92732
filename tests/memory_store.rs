//! `MokaStore` against the store conformance suite.

use sangho_webhook::store::MokaStore;

sangho_webhook::idempotency_store_conformance!(async { MokaStore::new() });
