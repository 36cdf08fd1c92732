//! The in-memory inbox, the reference, passes its own conformance suite.

sangho_webhook::inbox_conformance!(async { sangho_webhook::inbox::MemoryInbox::new() });
