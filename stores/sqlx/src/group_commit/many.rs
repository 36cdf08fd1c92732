//! Many writes of one kind in one statement: a group's claims, completions, inbox receipts or
//! takes of distinct events, each row as the write's own statement would write it, in one
//! round trip instead of one each (`*_many.sql`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::{Answer, Value};
use crate::{
    dialect::{Bind, Dialect, Driver, ManyRows, TakenRow},
    plans::{Generations, in_generation},
};

/// A statement of many rows (`claim_many.sql`, …), and the statement that reads what it did
/// not write (`state_many.sql`), rendered for the store's table.
#[derive(Debug)]
pub(crate) struct Many {
    /// The statement: `{rows}` stands for the rows' values.
    sql: Arc<str>,
    /// Run with the ids of the rows `sql` did not answer (`{ids}` stands for them), if any.
    otherwise: Option<Arc<str>>,
    /// Whether `sql` answers taken events (by the token each was taken under), not texts.
    taking: bool,
    /// Where `sql` answers a claim in flight by its owner (`in_flight <token>`, MariaDB's
    /// claims): the bind of each row that holds its claim's token. The row's own token is
    /// answered `acquired`, another's `in_flight`, as the one-row statement answers.
    acquired_by: Option<usize>,
    /// Where `sql` answers an inbox row by the sequence number it holds (`sequence <n>`,
    /// MariaDB's receipts): the statement that draws the rows' numbers first, one per row
    /// (`inbox_receive_numbers.sql`, binding the count), each bound after its row's values.
    /// The row that holds its own number is answered `stored`, any other `duplicate`, as the
    /// one-row statement answers.
    draw: Option<Arc<str>>,
    /// The statements with their placeholders, by row count (a power of two: few statements
    /// to prepare, each prepared once per connection and planned again as the table grows),
    /// row width and what rides along with them.
    rendered: Mutex<HashMap<(usize, usize, bool, bool), Rendered>>,
    /// The generation of the statements' plans ([`crate::plans`]), counted over all row counts.
    generations: Generations,
}

/// A statement of many rows with its placeholders, for one row count, in a generation of its
/// plans.
#[derive(Debug, Clone)]
struct Rendered {
    sql: Arc<str>,
    otherwise: Option<Arc<str>>,
    generation: u32,
}

/// What a statement of many rows sends with it, in its one round trip: the group's `BEGIN`
/// before it, the group's `COMMIT` after it (`GROUP_BEGIN_AND_COMMIT_RIDE_ALONG`). Nothing, by
/// default. A statement that reads what it did not write after it (`state_many.sql`) never
/// carries the `COMMIT`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AlongWith<'a> {
    pub(super) begin: Option<&'a str>,
    pub(super) commit: bool,
}

/// One write of a statement of many rows: its id, by which its answer is found (its event's
/// id; a take's, its worker's token), and its binds (the row's values, the id first).
pub(super) struct Row<'a> {
    pub(super) id: &'a str,
    pub(super) binds: &'a [Value],
}

impl Many {
    pub(crate) fn new(sql: Arc<str>, otherwise: Option<Arc<str>>) -> Self {
        Self {
            sql,
            otherwise,
            taking: false,
            acquired_by: None,
            draw: None,
            rendered: Mutex::new(HashMap::new()),
            generations: Generations::default(),
        }
    }

    /// A statement of many takes (`inbox_take_many.sql`): each row answers the event taken
    /// under its token, if any.
    pub(crate) fn taking(sql: Arc<str>) -> Self {
        Self {
            taking: true,
            ..Self::new(sql, None)
        }
    }

    /// A statement of claims that answers a claim in flight by its owner, the claim's token
    /// being the row's bind at `token` (`None`: it answers each status itself).
    pub(crate) fn acquired_by(self, token: Option<usize>) -> Self {
        Self {
            acquired_by: token,
            ..self
        }
    }

    /// A statement of receipts that answers an inbox row by its sequence number, the numbers
    /// drawn first by `draw` (`None`: it answers each status itself).
    pub(crate) fn numbered(self, draw: Option<Arc<str>>) -> Self {
        Self { draw, ..self }
    }

    /// Whether the statement answers every row by itself: it reads nothing else before or
    /// after it (no `otherwise`, no numbers drawn first), so that it may run alone, outside
    /// a transaction.
    pub(super) fn is_one_statement(&self) -> bool {
        self.otherwise.is_none() && self.draw.is_none()
    }

    /// The statements for `count` rows of `width` values, whose first row binds `first`, with
    /// what rides `along`, in the generation of this run's plans.
    fn rendered<D: Dialect>(
        &self,
        count: usize,
        first: &[Bind<'_>],
        along: AlongWith<'_>,
    ) -> Rendered {
        let generation = self.generations.next_run();
        let width = first.len();
        let key = (count, width, along.begin.is_some(), along.commit);
        let mut rendered = self
            .rendered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let current = rendered.get(&key);
        if let Some(current) = current.filter(|current| current.generation == generation) {
            return current.clone();
        }
        let row = |index: usize| {
            let values: Vec<String> = first
                .iter()
                .enumerate()
                .map(|(column, value)| D::placeholder(index * width + column + 1, *value))
                .collect();
            let ManyRows { open, close, .. } = D::MANY_ROWS;
            format!("{open}{}{close}", values.join(", "))
        };
        let rows: Vec<String> = (0..count).map(row).collect();
        let ids: Vec<String> = (0..count)
            .map(|index| D::placeholder(index + 1, Bind::Text("")))
            .collect();
        let statement = self.sql.replace("{rows}", &rows.join(D::MANY_ROWS.between));
        let mut sql = in_generation(&statement, generation);
        if let Some(begin) = along.begin {
            sql = format!("{begin};\n{sql}");
        }
        debug_assert!(
            !(along.commit && self.otherwise.is_some()),
            "the COMMIT rides only with a statement that reads nothing after it"
        );
        if along.commit {
            sql = format!("{sql};\nCOMMIT");
        }
        let renewed = Rendered {
            sql: sql.into(),
            otherwise: self.otherwise.as_ref().map(|otherwise| {
                in_generation(&otherwise.replace("{ids}", &ids.join(", ")), generation).into()
            }),
            generation,
        };
        rendered.insert(key, renewed.clone());
        renewed
    }

    /// Writes `rows` (of distinct ids) in one statement on `connection`, inside its open
    /// transaction, then reads the state of those it did not write where the dialect needs
    /// that: each row's answer, in order, as its own statement would answer it.
    pub(super) async fn write<D: Dialect>(
        &self,
        connection: &mut <D::Database as sqlx::Database>::Connection,
        rows: &[Row<'_>],
    ) -> Result<Vec<Answer>, sqlx::Error> {
        self.write_along::<D>(connection, rows, AlongWith::default())
            .await
    }

    /// [`Many::write`], the statement sent with what rides `along` with it: every answer
    /// comes once the whole query (its `COMMIT` too) has run.
    pub(super) async fn write_along<'a, D: Dialect>(
        &self,
        connection: &mut <D::Database as sqlx::Database>::Connection,
        rows: &[Row<'a>],
        along: AlongWith<'_>,
    ) -> Result<Vec<Answer>, sqlx::Error> {
        let Some(first) = rows.first() else {
            return Ok(Vec::new());
        };
        let count = rows.len().next_power_of_two();
        // Each row's values, then its sequence number where the statement is numbered.
        let numbers = match &self.draw {
            Some(draw) => Some(drawn::<D>(connection, draw, rows.len()).await?),
            None => None,
        };
        let number = |at: usize| numbers.as_ref().map(|numbers| numbers[at]);
        let first = row_binds(first, number(0));
        let rendered = self.rendered::<D>(count, &first, along);
        // The padding rows' values have the first row's types: a prepared statement keeps
        // the types it was first bound with.
        let padding = first
            .iter()
            .map(|value| -> Bind<'a> { value.padding() })
            .cycle()
            .take((count - rows.len()) * first.len());
        let binds: Vec<Bind<'_>> = rows
            .iter()
            .enumerate()
            .flat_map(|(at, row)| row_binds(row, number(at)))
            .chain(padding)
            .collect();
        if self.taking {
            let taken =
                <D::Database as Driver>::fetch_taken_many_in(connection, &rendered.sql, &binds);
            let mut taken: HashMap<String, TakenRow> = taken
                .await?
                .into_iter()
                .map(
                    |(id, kind, body, headers, path, received, start, attempt, key, token)| {
                        (
                            token,
                            (id, kind, body, headers, path, received, start, attempt, key),
                        )
                    },
                )
                .collect();
            return Ok(rows
                .iter()
                .map(|row| Answer::Taken(taken.remove(row.id)))
                .collect());
        }
        let mut answered: HashMap<String, Option<String>> =
            <D::Database as Driver>::fetch_pairs_in(connection, &rendered.sql, &binds)
                .await?
                .into_iter()
                .collect();
        let unanswered: Vec<Bind<'_>> = rows
            .iter()
            .filter(|row| !answered.contains_key(row.id))
            .map(|row| Bind::Text(row.id))
            .collect();
        if let (Some(otherwise), false) = (&rendered.otherwise, unanswered.is_empty()) {
            let padding = count - unanswered.len();
            let ids: Vec<Bind<'_>> = unanswered
                .into_iter()
                .chain(std::iter::repeat_n(Bind::OptText(None), padding))
                .collect();
            let states = <D::Database as Driver>::fetch_pairs_in(connection, otherwise, &ids);
            answered.extend(states.await?);
        }
        Ok(rows
            .iter()
            .enumerate()
            .map(|(at, row)| {
                let answer = answered.remove(row.id).flatten();
                Answer::Text(match (self.acquired_by, number(at)) {
                    (Some(token), _) => {
                        answer.map(|answer| acquired_by(answer, row.binds.get(token)))
                    }
                    (None, Some(number)) => answer.map(|answer| stored_by(answer, number)),
                    (None, None) => answer,
                })
            })
            .collect())
    }
}

/// A row's binds: its values, then its sequence number where its statement is numbered.
fn row_binds<'a>(row: &Row<'a>, number: Option<i64>) -> Vec<Bind<'a>> {
    row.binds
        .iter()
        .map(Value::bind)
        .chain(number.map(Bind::Int))
        .collect()
}

/// Draws `count` sequence numbers with `draw` on `connection`, one for each row of a numbered
/// statement.
async fn drawn<D: Dialect>(
    connection: &mut <D::Database as sqlx::Database>::Connection,
    draw: &Arc<str>,
    count: usize,
) -> Result<Vec<i64>, sqlx::Error> {
    let asked = i64::try_from(count).unwrap_or(i64::MAX);
    let count_bind = [Bind::Int(asked)];
    let rows = <D::Database as Driver>::fetch_pairs_in(connection, draw, &count_bind);
    let numbers = rows
        .await?
        .into_iter()
        .map(|(number, _)| number.parse::<i64>())
        .collect::<Result<Vec<i64>, _>>()
        .map_err(|error| sqlx::Error::Protocol(format!("a drawn sequence number: {error}")))?;
    if numbers.len() != count {
        return Err(sqlx::Error::Protocol(format!(
            "{} sequence numbers drawn, {count} asked",
            numbers.len()
        )));
    }
    Ok(numbers)
}

/// A receipt's status from an answer that names an inbox row by its sequence number, and
/// what follows it (the time it was received): `stored` with what follows where it is the
/// receipt's own `number`, `duplicate` where it is another's.
fn stored_by(answer: String, number: i64) -> String {
    let Some(held) = answer.strip_prefix("sequence ") else {
        return answer;
    };
    let (held, received) = match held.split_once(' ') {
        Some((held, received)) => (held, Some(received)),
        None => (held, None),
    };
    match (held.parse() == Ok(number), received) {
        (true, Some(received)) => format!("stored {received}"),
        (true, None) => "stored".to_owned(),
        (false, _) => "duplicate".to_owned(),
    }
}

/// A claim's status from an answer that names a claim in flight by its owner: `acquired`
/// where the owner is the claim's own `token`.
fn acquired_by(answer: String, token: Option<&Value>) -> String {
    match (answer.strip_prefix("in_flight "), token) {
        (Some(owner), Some(Value::Text(token))) if owner == token => "acquired".to_owned(),
        (Some(_), _) => "in_flight".to_owned(),
        (None, _) => answer,
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use std::sync::Arc;

    use sqlx::Connection;

    use super::{Many, Row};
    use crate::{dialect::Postgres, group_commit::Value};

    #[tokio::test]
    #[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
    async fn padding_rows_keep_the_types_the_statement_was_prepared_with_on_postgres() {
        let url = std::env::var("SANGHO_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
        let sql: Arc<str> = "WITH r (event_id, n) AS (VALUES {rows}) \
                             SELECT event_id, (n + 1)::text FROM r WHERE event_id IS NOT NULL"
            .into();
        let many = Many::new(sql, None);
        let values: Vec<[Value; 2]> = (0..4)
            .map(|n| [Value::Text(format!("evt_{n}")), Value::Int(n)])
            .collect();
        // Three rows and a padding row prepare the statement of four; then four real rows
        // bind an integer where the padding bound its NULL.
        for rows in [3, 4] {
            let rows: Vec<Row<'_>> = values[..rows]
                .iter()
                .map(|binds| Row {
                    id: match &binds[0] {
                        Value::Text(id) => id,
                        _ => unreachable!(),
                    },
                    binds,
                })
                .collect();
            let answers = many
                .write::<Postgres>(&mut connection, &rows)
                .await
                .unwrap();
            let texts: Vec<Option<String>> = answers.into_iter().map(|a| a.into_text()).collect();
            let expected: Vec<Option<String>> =
                (1..=rows.len()).map(|n| Some(n.to_string())).collect();
            assert_eq!(texts, expected);
        }
    }
}

#[cfg(all(test, feature = "mariadb"))]
mod mariadb_tests {
    use std::sync::Arc;

    use sqlx::{AssertSqlSafe, Connection, Executor};

    use crate::dialect::MariaDb;

    /// A group draws one sequence number for each of its receipts, however many: more than
    /// the server's default bound on a recursive query's iterations (1 000) too.
    #[tokio::test]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn a_group_draws_a_sequence_number_for_each_receipt_however_many_on_mariadb() {
        let url = std::env::var("SANGHO_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
        let mut connection = sqlx::MySqlConnection::connect(&url).await.unwrap();
        let table = format!("draw_{}", std::process::id());
        let create = format!("CREATE OR REPLACE SEQUENCE {table}_sequence");
        connection.execute(AssertSqlSafe(create)).await.unwrap();
        let file = include_str!("../../queries/mariadb/inbox_receive_numbers.sql");
        let draw: Arc<str> = crate::queries::statement(file)
            .replace("{table}", &table)
            .into();
        let mut last = 0;
        for count in [1, 64, 1500] {
            let numbers = super::drawn::<MariaDb>(&mut connection, &draw, count).await;
            let numbers = numbers.unwrap_or_else(|error| panic!("{count} numbers: {error}"));
            assert_eq!(numbers.len(), count);
            for number in numbers {
                assert!(number > last, "each number drawn once, in order");
                last = number;
            }
        }
        let drop = format!("DROP SEQUENCE {table}_sequence");
        connection.execute(AssertSqlSafe(drop)).await.unwrap();
    }
}
