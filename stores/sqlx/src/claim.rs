//! What the stores share around their statements: the statements prepared for a table, and
//! reading a claim statement that answers the row as it now is.

use std::sync::Arc;

#[cfg(any(feature = "sqlite", feature = "mysql"))]
use sangho_webhook::store::{Claim, ClaimToken, StoreError};

use crate::TableName;

/// A store's four statements, prepared once for its table.
#[derive(Debug)]
pub(crate) struct Queries {
    pub(crate) claim: Arc<str>,
    pub(crate) complete: Arc<str>,
    pub(crate) release: Arc<str>,
    pub(crate) purge: Arc<str>,
}

impl Queries {
    /// The templates `[claim, complete, release, purge]` for `table`: each `(placeholder,
    /// sql)` of `substitutions` replaced first, then `{table}`.
    pub(crate) fn new(
        table: &TableName,
        [claim, complete, release, purge]: [&str; 4],
        substitutions: &[(&str, &str)],
    ) -> Self {
        let sql = |template: &str| {
            let statement = substitutions
                .iter()
                .fold(template.to_owned(), |statement, (placeholder, sql)| {
                    statement.replace(placeholder, sql)
                });
            table.sql(&statement)
        };
        Self {
            claim: sql(claim),
            complete: sql(complete),
            release: sql(release),
            purge: sql(purge),
        }
    }
}

/// The outcome of a claim by `token` from the row the claim statement returned (`state`,
/// `claim_token`), as MariaDB and SQLite answer it: in flight and ours is acquired, in flight
/// and someone else's is in flight, completed is completed.
///
/// # Errors
///
/// [`StoreError::Protocol`] for any other state (the table was written by something else).
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn claim_from_row(
    token: ClaimToken,
    state: &str,
    owner: Option<&str>,
) -> Result<Claim, StoreError> {
    match state {
        "in_flight" if owner == Some(token.as_str()) => Ok(Claim::Acquired(token)),
        "in_flight" => Ok(Claim::InFlight),
        "completed" => Ok(Claim::Completed),
        other => Err(StoreError::Protocol(format!(
            "unexpected state {other:?} in the table"
        ))),
    }
}
