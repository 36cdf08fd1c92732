use std::{fmt, sync::Arc};

use crate::Error;

/// The name of the table a store uses: a plain SQL identifier, checked once when it is set.
///
/// 1 to 46 characters of ASCII letters, digits and `_`, not starting with a digit, so that it
/// can be written into SQL unquoted and the index name derived from it (at most 63 characters)
/// stay within PostgreSQL's limit. Like every unquoted identifier it is case-insensitive
/// (PostgreSQL folds it to lower case). To put the table in another schema, set the
/// connection's `search_path`.
///
/// ```
/// use sangho_webhook_sqlx::TableName;
///
/// assert_eq!(TableName::default().as_str(), "processed_webhook_events");
/// assert!(TableName::new("shop_webhook_events").is_ok());
/// assert!(TableName::new("1events").is_err());
/// assert!(TableName::new("events\"; DROP TABLE users; --").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TableName(Arc<str>);

impl TableName {
    /// The provider's documented table name, the default: `processed_webhook_events`.
    pub const DEFAULT: &'static str = "processed_webhook_events";

    /// The longest accepted name.
    pub const MAX_LEN: usize = 46;

    /// Checks `name` and keeps it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTableName`] if it is not a plain identifier as described above.
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        let mut chars = name.chars();
        let valid_start = chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_');
        let valid_rest = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if valid_start && valid_rest && name.len() <= Self::MAX_LEN {
            Ok(Self(name.into()))
        } else {
            Err(Error::InvalidTableName { name })
        }
    }

    /// The name, as written into SQL.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of the `processed_at` index: the provider's `idx_webhook_processed_at` for the
    /// default table, `<table>_processed_at_idx` for any other.
    #[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
    pub(crate) fn index_name(&self) -> String {
        self.index("processed_at")
    }

    /// The name of the `expires_at` index: `idx_webhook_expires_at` for the default table,
    /// `<table>_expires_at_idx` for any other.
    #[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
    pub(crate) fn expiry_index_name(&self) -> String {
        self.index("expires_at")
    }

    /// The name of inbox mode's index of unfinished events on PostgreSQL:
    /// `idx_webhook_unfinished` for the default table, `<table>_unfinished_idx` for any other.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn unfinished_index_name(&self) -> String {
        self.index("unfinished")
    }

    /// The name of inbox mode's index of the unfinished events of each ordering key on
    /// PostgreSQL: `idx_webhook_ordering` for the default table, `<table>_ordering_idx` for
    /// any other.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn ordering_index_name(&self) -> String {
        self.index("ordering")
    }

    /// The name of inbox mode's index of the events waiting for their first attempt on
    /// PostgreSQL: `idx_webhook_fresh` for the default table, `<table>_fresh_idx` for any other.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn fresh_index_name(&self) -> String {
        self.index("fresh")
    }

    /// The name of inbox mode's index of dead events: `idx_webhook_dead` for the default
    /// table, `<table>_dead_idx` for any other.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn dead_index_name(&self) -> String {
        self.index("dead")
    }

    /// The names of inbox mode's four indexes on MariaDB, each keyed on `inbox_state` (NULL on
    /// a row of the direct mode): the queue of unfinished events, the ends of their leases, the
    /// events new since their receipt, and each ordering key's events
    /// (`idx_webhook_<queue|lease_ends|new_events|key_order>` for the default table,
    /// `<table>_<…>_idx` for any other).
    #[cfg_attr(not(feature = "mariadb"), allow(dead_code))]
    pub(crate) fn inbox_index_names(&self) -> [String; 4] {
        ["queue", "lease_ends", "new_events", "key_order"].map(|index| self.index(index))
    }

    /// The name of inbox mode's receipt sequence: `<table>_sequence`.
    #[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
    pub(crate) fn sequence_name(&self) -> String {
        format!("{}_sequence", self.0)
    }

    fn index(&self, column: &str) -> String {
        if &*self.0 == Self::DEFAULT {
            format!("idx_webhook_{column}")
        } else {
            format!("{}_{column}_idx", self.0)
        }
    }

    /// The migration `script` (written for the default table) for this table. Each name is
    /// replaced once: a table name that contains the default one (`…_v2`) is not rewritten
    /// again inside the index names.
    pub(crate) fn schema(&self, script: &str) -> String {
        // Each index name `idx_webhook_<column>` first becomes a marker (the table's name may
        // be part of an index's), then the table's name is replaced, then each marker.
        const PREFIX: &str = "idx_webhook_";
        let mut marked = String::with_capacity(script.len());
        let mut rest = script;
        while let Some(at) = rest.find(PREFIX) {
            marked.push_str(&rest[..at]);
            let after = &rest[at + PREFIX.len()..];
            let end = after
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(after.len());
            marked.push('\u{0}');
            marked.push_str(&after[..end]);
            marked.push('\u{0}');
            rest = &after[end..];
        }
        marked.push_str(rest);
        let renamed = marked.replace(Self::DEFAULT, self.as_str());
        let mut named = String::with_capacity(renamed.len());
        let mut parts = renamed.split('\u{0}');
        named.push_str(parts.next().unwrap_or_default());
        while let (Some(column), Some(text)) = (parts.next(), parts.next()) {
            named.push_str(&self.index(column));
            named.push_str(text);
        }
        named
    }
}

impl Default for TableName {
    fn default() -> Self {
        Self(Self::DEFAULT.into())
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<&str> for TableName {
    type Error = Error;

    fn try_from(name: &str) -> Result<Self, Error> {
        Self::new(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_identifiers_are_accepted() {
        for name in ["events", "_events", "Events_2026", &"e".repeat(46)] {
            assert_eq!(TableName::new(name).unwrap().as_str(), name);
        }
    }

    #[test]
    fn anything_else_is_rejected() {
        for name in [
            "",
            "2events",
            "events-2026",
            "public.events",
            "\"events\"",
            "events; DROP TABLE users",
            "événements",
            &"e".repeat(47),
        ] {
            assert!(
                matches!(TableName::new(name), Err(Error::InvalidTableName { .. })),
                "{name:?} must be rejected"
            );
        }
    }

    #[test]
    fn the_default_table_keeps_the_provider_index_name() {
        let schema = TableName::default().schema(include_str!("../migrations/postgres.sql"));
        assert!(schema.contains("idx_webhook_processed_at"));
        let custom = TableName::new("shop_events").unwrap();
        let schema = custom.schema(include_str!("../migrations/postgres.sql"));
        assert!(schema.contains("CREATE TABLE IF NOT EXISTS shop_events ("));
        assert!(schema.contains("shop_events_processed_at_idx"));
        assert!(!schema.contains("processed_webhook_events"));
        assert!(!schema.contains("idx_webhook"));
    }

    #[test]
    fn a_table_named_after_the_default_keeps_its_index_names() {
        let table = TableName::new("processed_webhook_events_v2").unwrap();
        let schema = table.schema(include_str!("../migrations/postgres.sql"));
        assert!(schema.contains("processed_webhook_events_v2_processed_at_idx"));
        assert!(schema.contains("processed_webhook_events_v2_expires_at_idx"));
        assert!(!schema.contains("_v2_v2"));
        assert_eq!(
            table.index_name(),
            "processed_webhook_events_v2_processed_at_idx"
        );
    }
}
