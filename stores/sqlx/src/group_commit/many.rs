//! Many writes of one kind in one statement: a group's claims, completions or inbox receipts
//! of distinct events, each row as the write's own statement would write it, in one round
//! trip instead of one each (`*_many.sql`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::{Answer, Value};
use crate::dialect::{Bind, Dialect};

/// A statement of many rows (`claim_many.sql`, …), and the statement that reads what it did
/// not write (`state_many.sql`), rendered for the store's table.
#[derive(Debug)]
pub(crate) struct Many {
    /// The statement: `{rows}` stands for the rows' values.
    sql: Arc<str>,
    /// Run with the ids of the rows `sql` did not answer (`{ids}` stands for them), if any.
    otherwise: Option<Arc<str>>,
    /// The statements with their placeholders, by row count (a power of two: few statements
    /// to prepare, each prepared once per connection).
    rendered: Mutex<HashMap<(usize, usize), Rendered>>,
}

/// A statement of many rows with its placeholders, for one row count.
#[derive(Debug, Clone)]
struct Rendered {
    sql: Arc<str>,
    otherwise: Option<Arc<str>>,
}

/// One write of a statement of many rows: its event id and its binds (the row's values).
pub(super) struct Row<'a> {
    pub(super) event_id: &'a str,
    pub(super) binds: &'a [Value],
}

impl Many {
    pub(crate) fn new(sql: Arc<str>, otherwise: Option<Arc<str>>) -> Self {
        Self {
            sql,
            otherwise,
            rendered: Mutex::new(HashMap::new()),
        }
    }

    /// The statements for `count` rows of `width` values, whose first row binds `first`.
    fn rendered<D: Dialect>(&self, count: usize, first: &[Value]) -> Rendered {
        let width = first.len();
        let mut rendered = self
            .rendered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        rendered
            .entry((count, width))
            .or_insert_with(|| {
                let row = |index: usize| {
                    let values: Vec<String> = first
                        .iter()
                        .enumerate()
                        .map(|(column, value)| {
                            D::placeholder(index * width + column + 1, value.bind())
                        })
                        .collect();
                    format!("({})", values.join(", "))
                };
                let rows: Vec<String> = (0..count).map(row).collect();
                let ids: Vec<String> = (0..count)
                    .map(|index| D::placeholder(index + 1, Bind::Text("")))
                    .collect();
                Rendered {
                    sql: self.sql.replace("{rows}", &rows.join(", ")).into(),
                    otherwise: self
                        .otherwise
                        .as_ref()
                        .map(|otherwise| otherwise.replace("{ids}", &ids.join(", ")).into()),
                }
            })
            .clone()
    }

    /// The statements that write `rows` (of distinct events), with their binds: the
    /// statement of many rows, then the one that reads what it did not write, if any (it
    /// reads every row's event: an answer of the first statement comes first, and wins).
    pub(super) fn statements<'a, D: Dialect>(
        &self,
        rows: &[Row<'a>],
    ) -> Vec<(Arc<str>, Vec<Bind<'a>>)> {
        let Some(first) = rows.first() else {
            return Vec::new();
        };
        let count = rows.len().next_power_of_two();
        let rendered = self.rendered::<D>(count, first.binds);
        let padding = (count - rows.len()) * first.binds.len();
        // The padding's values have the first row's types: a prepared statement keeps the
        // types it was first bound with.
        let padding = first
            .binds
            .iter()
            .map(|value| -> Bind<'a> { value.padding() })
            .cycle()
            .take(padding);
        let binds: Vec<Bind<'a>> = rows
            .iter()
            .flat_map(|row| row.binds.iter().map(Value::bind))
            .chain(padding)
            .collect();
        let mut statements = vec![(rendered.sql, binds)];
        if let Some(otherwise) = rendered.otherwise {
            let ids = rows
                .iter()
                .map(|row| Bind::Text(row.event_id))
                .chain(std::iter::repeat_n(Bind::OptText(None), count - rows.len()))
                .collect();
            statements.push((otherwise, ids));
        }
        statements
    }

    /// Each row's answer, in order, from what the statements answered by event id.
    pub(super) fn answers(
        rows: &[Row<'_>],
        answered: &mut HashMap<String, Option<String>>,
    ) -> Vec<Answer> {
        rows.iter()
            .map(|row| Answer::Text(answered.remove(row.event_id).flatten()))
            .collect()
    }
}
