//! What the stores share around their statements: the statements prepared for a table, and
//! reading a claim statement that answers the row as it now is.

use std::sync::Arc;

#[cfg(feature = "mysql")]
use sangho_webhook::store::{Claim, ClaimToken, StoreError};

use crate::TableName;

/// A store's five statements, prepared once for its table.
#[derive(Debug)]
pub(crate) struct Queries {
    pub(crate) claim: Arc<str>,
    pub(crate) renew: Arc<str>,
    pub(crate) complete: Arc<str>,
    pub(crate) release: Arc<str>,
    pub(crate) purge: Arc<str>,
}

impl Queries {
    /// The templates `[claim, renew, complete, release, purge]` for `table`: each `(placeholder,
    /// sql)` of `substitutions` replaced first, then `{table}`.
    pub(crate) fn new(
        table: &TableName,
        [claim, renew, complete, release, purge]: [&str; 5],
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
            renew: sql(renew),
            complete: sql(complete),
            release: sql(release),
            purge: sql(purge),
        }
    }
}

/// The outcome of a claim by `token` from the row the claim statement returned (`state`,
/// `claim_token`, and whether the statement wrote the claim: its `processed_at` is the
/// statement's time), as MariaDB answers it: in flight, ours and written now is acquired; any
/// other in flight is in flight (the token's own live claim too); completed is completed.
///
/// # Errors
///
/// [`StoreError::Protocol`] for any other state (the table was written by something else).
#[cfg(feature = "mysql")]
pub(crate) fn claim_from_row(
    token: &ClaimToken,
    state: &str,
    owner: Option<&str>,
    fresh: bool,
) -> Result<Claim, StoreError> {
    match state {
        "in_flight" if fresh && owner == Some(token.as_str()) => Ok(Claim::Acquired),
        "in_flight" => Ok(Claim::InFlight),
        "completed" => Ok(Claim::Completed),
        other => Err(StoreError::Protocol(format!(
            "unexpected state {other:?} in the table"
        ))),
    }
}
