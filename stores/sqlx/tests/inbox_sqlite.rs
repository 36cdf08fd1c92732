//! Inbox mode on SQLite: the inbox conformance suite (each check on a file of its own), the
//! migration of the tables of the previous release and of the provider's schema, the purges
//! users already run beside inbox events, and the rolling deploy between the two modes. Not
//! ignored: SQLite needs no server.

mod common;

sangho_webhook::inbox_conformance!(async { common::sqlite_store(8).await.inbox_under_test() });
