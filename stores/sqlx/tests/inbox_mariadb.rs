//! Inbox mode on MariaDB: the inbox conformance suite, each check in a table of its own, and
//! what only an existing table shows: the upgrade of a table of the previous release or of the
//! provider's schema, the purges users already run, and a rolling deploy beside the direct mode.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx --features mariadb --
//! --include-ignored`, against `SANGHO_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`).

mod common;

use common::mariadb_store;

sangho_webhook::inbox_conformance!(
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    => async { mariadb_store("inbox", 16).await.inbox_under_test() }
);
