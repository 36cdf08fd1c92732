//! Inbox mode through its pieces: the conformance suite on the in-memory inbox, the receipt's
//! answers, and the worker's processing, retries, dead letters, replays and shutdown.

mod conformance;
mod receipt;
mod support;
mod worker;
