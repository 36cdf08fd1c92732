//! The store's statements: the SQL files of the crate's `queries/<dialect>/` folders (included
//! at compile time by each dialect), rendered once per store for its table and settings
//! ([`Queries`]), and the decoding of the claim's answer ([`ClaimRow`]).
//!
//! The placeholder convention of the files is documented in `queries/README.md`: `{table}`,
//! `{lock_timeout_ms}`, `{lock_timeout_s}`, `{completion_lock_timeout_s}` and
//! `{asynchronous_commit}`, and the index names of the migration script
//! (`idx_webhook_<name>`), each substituted here and nowhere else.

use std::{sync::Arc, time::Duration};

use sangho_webhook::store::{Claim, StoreError};

use crate::{
    TableName,
    dialect::{Bind, Sealed},
    group_commit::Many,
};

/// A store's statements, rendered once for its table and settings (never per call), with the
/// files' comments left out.
#[derive(Debug)]
pub(crate) struct Queries {
    pub(crate) claim: Arc<str>,
    pub(crate) state: Option<Arc<str>>,
    pub(crate) renew: Arc<str>,
    pub(crate) complete: Arc<str>,
    pub(crate) release: Arc<str>,
    /// The statements of each file of one purge batch.
    pub(crate) purge: Vec<Vec<Arc<str>>>,
    /// The statements of each file that adopts an existing table (SQLite's migration alone
    /// reads them).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) adopt: Vec<Vec<Arc<str>>>,
    /// The purge for cron, `;` included: SQL to copy.
    pub(crate) cron_purge: String,
    /// Inbox mode's statements (`None` where inbox mode is not available yet).
    pub(crate) inbox: Option<InboxQueries>,
    /// The statements of many rows a group commit runs, where the dialect has them.
    pub(crate) many: Option<ManyQueries>,
}

/// The statements of many rows (`*_many.sql`), rendered.
#[derive(Debug)]
pub(crate) struct ManyQueries {
    pub(crate) claim: Arc<Many>,
    pub(crate) complete: Arc<Many>,
    pub(crate) receive: Option<Arc<Many>>,
    pub(crate) inbox_complete: Option<Arc<Many>>,
    pub(crate) inbox_take: Option<Arc<Many>>,
}

/// A statement and which of its operation's binds it binds, in order; and the statements of
/// its file after it, which bind nothing (a dialect that runs them, in one transaction with
/// the first, overrides `Sealed::inbox_text` and `Sealed::inbox_taken`).
#[derive(Debug)]
pub struct Query {
    pub(crate) sql: Arc<str>,
    pub(crate) binds: &'static [usize],
    pub(crate) then: Vec<Arc<str>>,
}

impl Query {
    /// The statement's binds, picked from its operation's.
    pub(crate) fn binds<'a>(&self, operation: &[Bind<'a>]) -> Vec<Bind<'a>> {
        self.binds.iter().map(|&bind| operation[bind]).collect()
    }
}

/// Inbox mode's statements, rendered.
#[derive(Debug)]
pub(crate) struct InboxQueries {
    pub(crate) receive: Query,
    pub(crate) receive_taken: Option<Query>,
    pub(crate) take: Query,
    pub(crate) renew: Query,
    pub(crate) complete: Query,
    pub(crate) fail: Query,
    pub(crate) abandon: Query,
    pub(crate) state: Query,
    pub(crate) stats: Query,
    pub(crate) gauges: Query,
    pub(crate) stats_by_type: Query,
    pub(crate) list: Query,
    pub(crate) count: Query,
    pub(crate) show: Query,
    pub(crate) replay: Query,
    pub(crate) discard: Query,
}

impl InboxQueries {
    /// The receipt's statement: of an event written taken by a waiting take, where `taken`
    /// and the dialect has one.
    pub(crate) fn receipt(&self, taken: bool) -> &Query {
        match (&self.receive_taken, taken) {
            (Some(receive_taken), true) => receive_taken,
            _ => &self.receive,
        }
    }
}

impl Queries {
    /// The statements of a store with `lock_timeout`, as each runs on its own.
    pub(crate) fn new<D: Sealed>(
        table: &TableName,
        synchronous_claims: bool,
        lock_timeout: Duration,
    ) -> Self {
        Self::rendered::<D>(table, synchronous_claims, lock_timeout, false)
    }

    /// The statements as a group commit runs them, with the group's `lock_timeout`: on
    /// MariaDB a zero timeout is no wait at all, and its completions wait no longer than its
    /// claims.
    pub(crate) fn grouped<D: Sealed>(
        table: &TableName,
        synchronous_claims: bool,
        lock_timeout: Duration,
    ) -> Self {
        Self::rendered::<D>(table, synchronous_claims, lock_timeout, true)
    }

    fn rendered<D: Sealed>(
        table: &TableName,
        synchronous_claims: bool,
        lock_timeout: Duration,
        in_group: bool,
    ) -> Self {
        let templates = D::SQL;
        let seconds = match (in_group, lock_timeout.is_zero()) {
            (true, true) => 0,
            _ => whole(lock_timeout, Duration::from_secs(1), MAX_LOCK_TIMEOUT_S),
        };
        let completion_seconds = match in_group {
            true => seconds.to_string(),
            false => "@@SESSION.innodb_lock_wait_timeout".to_owned(),
        };
        let placeholders = [
            ("{table}", table.as_str().to_owned()),
            (
                "{lock_timeout_ms}",
                whole(lock_timeout, Duration::from_millis(1), MAX_LOCK_TIMEOUT_MS).to_string(),
            ),
            ("{lock_timeout_s}", seconds.to_string()),
            ("{completion_lock_timeout_s}", completion_seconds),
            ("{asynchronous_commit}", (!synchronous_claims).to_string()),
        ];
        // An index named as in the migration script (`idx_webhook_<name>`) is renamed for the
        // table as the script is, before `{table}` is replaced.
        let render = |file: &str| -> Vec<Arc<str>> {
            statements(file)
                .into_iter()
                .map(|statement| {
                    placeholders
                        .iter()
                        .fold(table.schema(&statement), |sql, (placeholder, value)| {
                            sql.replace(placeholder, value)
                        })
                        .into()
                })
                .collect()
        };
        let one = |file: &str| -> Arc<str> {
            let mut statements = render(file);
            assert_eq!(statements.len(), 1, "one statement in {file}");
            statements.remove(0)
        };
        let query = |(file, binds): (&str, &'static [usize])| {
            let mut statements = render(file);
            assert!(!statements.is_empty(), "a statement in {file}");
            let sql = statements.remove(0);
            Query {
                sql,
                binds,
                then: statements,
            }
        };
        let inbox = templates.inbox.as_ref().map(|inbox| InboxQueries {
            receive: query(inbox.receive),
            receive_taken: inbox.receive_taken.map(query),
            take: query(inbox.take),
            renew: query(inbox.renew),
            complete: query(inbox.complete),
            fail: query(inbox.fail),
            abandon: query(inbox.abandon),
            state: query(inbox.state),
            stats: query(inbox.stats),
            gauges: query(inbox.gauges),
            stats_by_type: query(inbox.stats_by_type),
            list: query(inbox.list),
            count: query(inbox.count),
            show: query(inbox.show),
            replay: query(inbox.replay),
            discard: query(inbox.discard),
        });
        let many = D::MANY.map(|many| ManyQueries {
            claim: Arc::new(
                Many::new(one(many.claim), many.state.map(one))
                    .acquired_by(many.claim_by_owner.then(claim_token_bind::<D>)),
            ),
            complete: Arc::new(Many::new(one(many.complete), None)),
            receive: many.receive.map(|sql| {
                Arc::new(Many::new(one(sql), None).numbered(many.receive_numbers.map(one)))
            }),
            inbox_complete: many
                .inbox_complete
                .map(|sql| Arc::new(Many::new(one(sql), None))),
            inbox_take: many.inbox_take.map(|sql| Arc::new(Many::taking(one(sql)))),
        });
        Self {
            inbox,
            many,
            claim: one(templates.claim),
            state: templates.state.map(one),
            renew: one(templates.renew),
            complete: one(templates.complete),
            release: one(templates.release),
            purge: templates.purge.iter().map(|file| render(file)).collect(),
            adopt: templates.adopt.iter().map(|file| render(file)).collect(),
            cron_purge: format!("{};", one(templates.cron_purge)),
        }
    }
}

/// The statements of an SQL file for `table`: its name in place of `{table}`, its indexes'
/// names as the migration script names them (a file run outside [`Queries`], by a dialect's
/// own code).
#[cfg_attr(not(any(feature = "mariadb", feature = "postgres")), allow(dead_code))]
pub(crate) fn statements_for(table: &TableName, file: &str) -> Vec<Arc<str>> {
    statements(file)
        .into_iter()
        .map(|sql| table.schema(&sql).replace("{table}", table.as_str()).into())
        .collect()
}

/// The statements of an SQL file: its comment lines left out, split at the `;` that end a
/// line, without that `;`.
pub(crate) fn statements(file: &str) -> Vec<String> {
    let code: String = file
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .map(|line| format!("{line}\n"))
        .collect();
    code.split(";\n")
        .map(str::trim)
        .filter(|statement| !statement.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The one statement of an SQL file without placeholders (see [`statements`]).
pub(crate) fn statement(file: &str) -> String {
    let mut statements = statements(file);
    assert_eq!(statements.len(), 1, "one statement in {file}");
    statements.remove(0)
}

/// Which of the claim statement's binds is the claim's token.
fn claim_token_bind<D: Sealed>() -> usize {
    D::SQL
        .claim_binds
        .iter()
        .position(|&bind| bind == 2)
        .expect("a claim binds its token")
}

/// The longest lock timeout PostgreSQL accepts, in milliseconds (`INT_MAX`).
const MAX_LOCK_TIMEOUT_MS: u64 = i32::MAX as u64;

/// The longest lock timeout written for MariaDB, in seconds: a year, the largest
/// `lock_wait_timeout` it accepts.
const MAX_LOCK_TIMEOUT_S: u64 = 365 * 24 * 3600;

/// `duration` in whole `unit`s, rounded up: at least 1 (a zero timeout would mean no bound, or
/// no wait at all), at most `max`.
fn whole(duration: Duration, unit: Duration, max: u64) -> u64 {
    let units = duration.as_nanos().div_ceil(unit.as_nanos());
    u64::try_from(units).unwrap_or(u64::MAX).clamp(1, max)
}

/// What a claim found, as its statements answer it: the `status` column of `claim.sql` (and of
/// SQLite's `state.sql`), or no row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimRow {
    /// `acquired`: the claim is the delivery's.
    Acquired,
    /// `completed`: a live completion.
    Completed,
    /// `in_flight`: another delivery's live claim; also no row at all (a record committed by a
    /// concurrent claim after the statement's snapshot, or gone since it was read).
    InFlight,
}

impl ClaimRow {
    /// Decodes a claim's answer: its `status`, if a row came back.
    ///
    /// # Errors
    ///
    /// [`StoreError::Protocol`] for a status the statements never answer.
    pub(crate) fn decode(status: Option<&str>) -> Result<Self, StoreError> {
        match status {
            Some("acquired") => Ok(Self::Acquired),
            Some("completed") => Ok(Self::Completed),
            Some("in_flight") | None => Ok(Self::InFlight),
            Some(other) => Err(StoreError::Protocol(format!(
                "unexpected claim answer {other:?}"
            ))),
        }
    }
}

impl From<ClaimRow> for Claim {
    fn from(row: ClaimRow) -> Self {
        match row {
            ClaimRow::Acquired => Claim::Acquired,
            ClaimRow::Completed => Claim::Completed,
            ClaimRow::InFlight => Claim::InFlight,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sangho_webhook::store::{Claim, StoreError};

    use super::{ClaimRow, MAX_LOCK_TIMEOUT_MS, MAX_LOCK_TIMEOUT_S, statements, whole};

    #[test]
    fn lock_timeouts_round_up_to_whole_units_of_at_least_one() {
        let (ms, s) = (Duration::from_millis(1), Duration::from_secs(1));
        assert_eq!(whole(Duration::from_secs(2), ms, MAX_LOCK_TIMEOUT_MS), 2000);
        assert_eq!(
            whole(Duration::from_micros(1500), ms, MAX_LOCK_TIMEOUT_MS),
            2
        );
        assert_eq!(whole(Duration::ZERO, ms, MAX_LOCK_TIMEOUT_MS), 1);
        assert_eq!(whole(Duration::from_millis(1500), s, MAX_LOCK_TIMEOUT_S), 2);
        assert_eq!(whole(Duration::from_millis(1), s, MAX_LOCK_TIMEOUT_S), 1);
        assert_eq!(
            whole(Duration::MAX, ms, MAX_LOCK_TIMEOUT_MS),
            i32::MAX as u64
        );
        assert_eq!(
            whole(Duration::MAX, s, MAX_LOCK_TIMEOUT_S),
            MAX_LOCK_TIMEOUT_S
        );
    }

    #[test]
    fn a_file_splits_into_its_statements_without_comments() {
        let file = "-- header\n-- more\nSET a = 1;\n-- inside\nSELECT 1\nFROM t;\n";
        assert_eq!(statements(file), ["SET a = 1", "SELECT 1\nFROM t"]);
    }

    /// The `ON CONFLICT …` (MariaDB: `ON DUPLICATE KEY UPDATE …`) clause of an SQL file up
    /// to its `RETURNING`, comments left out and whitespace folded, with `replace` applied.
    #[cfg(any(feature = "mariadb", feature = "postgres", feature = "sqlite"))]
    fn conflict_clause(file: &str, replace: &[(&str, &str)]) -> String {
        let code = statements(file).join(";\n");
        let start = code
            .find("ON CONFLICT")
            .or_else(|| code.find("ON DUPLICATE KEY UPDATE"))
            .expect("an upsert");
        let end = start + code[start..].find("RETURNING").expect("its RETURNING");
        // `EXCLUDED` is a keyword: its case is the file's.
        let folded = code[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace("excluded.", "EXCLUDED.");
        replace
            .iter()
            .fold(folded, |clause, (from, to)| clause.replace(from, to))
    }

    /// Each statement of many rows resolves a conflict as its one-row statement does (the
    /// files repeat the clause, so that each reads as SQL on its own). Where a group's
    /// receipts may be written taken, their statement assigns the values it wrote for the row
    /// where the receipt assigns a received event's.
    #[cfg(any(feature = "mariadb", feature = "postgres", feature = "sqlite"))]
    fn many_rows_resolve_conflicts_as_one_row<D: crate::dialect::Sealed>(token: &str) {
        let many = D::MANY.expect("statements of many rows");
        let inbox = D::SQL.inbox.expect("inbox mode");
        let owner = format!("e.claim_token = {token}");
        let by_owner = [(owner.as_str(), "e.claim_token = EXCLUDED.claim_token")];
        let as_received = match inbox.receive_taken {
            Some(_) => &RECEIVED_AS_WRITTEN[..],
            None => &[][..],
        };
        for (one, replace, many, as_one) in [
            (D::SQL.claim, &[][..], many.claim, &[][..]),
            (D::SQL.complete, &by_owner[..], many.complete, &[][..]),
        ]
        .into_iter()
        .chain(
            many.receive
                .map(|many| (inbox.receive.0, &[][..], many, as_received)),
        ) {
            assert_eq!(conflict_clause(one, replace), conflict_clause(many, as_one));
        }
    }

    /// The three assignments of a row taken over as written (received, or taken by a waiting
    /// worker), with the values a receipt of a received event writes.
    #[cfg(any(feature = "mariadb", feature = "postgres", feature = "sqlite"))]
    const RECEIVED_AS_WRITTEN: [(&str, &str); 3] = [
        ("VALUES(state), state)", "'received', state)"),
        ("VALUES(claim_token), claim_token)", "NULL, claim_token)"),
        ("VALUES(attempts), attempts)", "0, attempts)"),
    ];

    #[cfg(feature = "mariadb")]
    #[test]
    fn mariadb_s_statements_of_many_rows_resolve_conflicts_as_one_row() {
        many_rows_resolve_conflicts_as_one_row::<crate::dialect::MariaDb>("?");
    }

    /// MariaDB's receipt that hands its event to a waiting take resolves a conflict as the
    /// receipt does, but for the four assignments that write the event taken; a group's
    /// statement of receipts, as either, by the values it wrote for the row.
    #[cfg(feature = "mariadb")]
    #[test]
    fn mariadb_s_receipt_of_a_taken_event_resolves_conflicts_as_the_receipt() {
        let inbox = <crate::dialect::MariaDb as crate::dialect::Sealed>::SQL
            .inbox
            .expect("inbox mode");
        let taken = inbox.receive_taken.expect("a receipt of a taken event").0;
        let key_taken = "ordering_key = IF(expires_at <= UTC_TIMESTAMP(6), NULL, ordering_key)";
        let key_received =
            "ordering_key = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(ordering_key), ordering_key)";
        let as_received = [
            ("'in_flight', state)", "'received', state)"),
            ("VALUES(claim_token), claim_token)", "NULL, claim_token)"),
            (" 1, attempts)", " 0, attempts)"),
            (key_taken, key_received),
        ];
        assert_eq!(
            conflict_clause(taken, &as_received),
            conflict_clause(inbox.receive.0, &[])
        );
        // A group's row written taken resolves a conflict as the receipt of a taken event.
        let receipts = <crate::dialect::MariaDb as crate::dialect::Sealed>::MANY
            .and_then(|many| many.receive)
            .expect("a group's receipts");
        let as_taken = [
            ("VALUES(state), state)", "'in_flight', state)"),
            ("VALUES(attempts), attempts)", "1, attempts)"),
        ];
        assert_eq!(
            conflict_clause(receipts, &as_taken),
            conflict_clause(taken, &[(key_taken, key_received)])
        );
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_s_statements_of_many_rows_resolve_conflicts_as_one_row() {
        many_rows_resolve_conflicts_as_one_row::<crate::dialect::Sqlite>("?3");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_s_statements_of_many_rows_resolve_conflicts_as_one_row() {
        many_rows_resolve_conflicts_as_one_row::<crate::dialect::Postgres>("$3");
    }

    #[test]
    fn the_claim_s_status_decodes_into_the_claim() {
        let decode = |status| ClaimRow::decode(status).map(Claim::from).ok();
        assert_eq!(decode(Some("acquired")), Some(Claim::Acquired));
        assert_eq!(decode(Some("completed")), Some(Claim::Completed));
        assert_eq!(decode(Some("in_flight")), Some(Claim::InFlight));
        assert_eq!(decode(None), Some(Claim::InFlight));
        assert!(matches!(
            ClaimRow::decode(Some("0123456789abcdef0123456789abcdef")),
            Err(StoreError::Protocol(_))
        ));
    }
}
