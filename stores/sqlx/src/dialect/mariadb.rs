//! MariaDB: [`MariaDbStore`](crate::MariaDbStore).

use std::{future::Future, sync::Arc, time::Duration};

use sangho_webhook::store::StoreError;

use sqlx::{
    AssertSqlSafe, Connection, Executor, MySql, Row,
    error::DatabaseError,
    mysql::{MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPoolOptions, MySqlRow},
    pool::PoolConnection,
};

use super::{
    Bind, Dialect, Driver, InboxTemplates, KeyOf, Sealed, TakenRow, has_store_columns, micros,
    refuse_unusable, row_query,
    sealed::{ManyRows, ManyTemplates, Templates},
};
use crate::{
    Error, GroupCommit, SqlStore,
    group_commit::WriteError,
    queries::{Query, statement, statements, statements_for},
    turns::{Answered, Completion, Take, TurnOn, on_kept_connection},
};

/// The MariaDB dialect (feature `mariadb`, MariaDB 10.6 or later):
/// [`MariaDbStore`](crate::MariaDbStore). MySQL is not supported: the statements need
/// `INSERT … RETURNING` and `DELETE … RETURNING`, which only MariaDB has.
#[derive(Debug, Clone, Copy)]
pub struct MariaDb;

/// The session of the store's own connections: READ COMMITTED, in UTC.
const SESSION: &str = include_str!("../../queries/mariadb/session.sql");

/// Serialises concurrent `migrate()` calls (several replicas starting at once); answers 1 once
/// held, 0 after the timeout, NULL on an error.
const MIGRATION_LOCK: &str = include_str!("../../queries/mariadb/migration_lock.sql");

/// Ends [`MIGRATION_LOCK`].
const MIGRATION_UNLOCK: &str = include_str!("../../queries/mariadb/migration_unlock.sql");

/// The time zone UTC for the migration script's run, the session's own kept aside.
const MIGRATION_TIME_ZONE: &str = include_str!("../../queries/mariadb/migration_time_zone.sql");

/// Sets back the session's own time zone after the migration script's run.
const MIGRATION_TIME_ZONE_RESTORE: &str =
    include_str!("../../queries/mariadb/migration_time_zone_restore.sql");

/// The table's columns (none: no table).
const COLUMNS: &str = include_str!("../../queries/mariadb/columns.sql");

/// Whether the table is up to date besides its columns: 8 when it is.
const INDEXES: &str = include_str!("../../queries/mariadb/indexes.sql");

/// The server's version and its flush settings.
const SERVER: &str = include_str!("../../queries/mariadb/server.sql");

/// The isolation level of the transaction of an inbox operation of several statements.
const INBOX_TRANSACTION: &str = include_str!("../../queries/mariadb/inbox_transaction.sql");

/// Locks an ordering key for a receipt or a replay, on the connection that runs it: 1 once
/// locked (or with no key to lock), 0 when the wait ran out.
const KEY_LOCK: &str = include_str!("../../queries/mariadb/inbox_key_lock.sql");

/// Releases [`KEY_LOCK`]'s lock once the receipt or the replay has committed.
const KEY_UNLOCK: &str = include_str!("../../queries/mariadb/inbox_key_unlock.sql");

/// Completes the events of a turn of completions (see [`complete_many`]).
const COMPLETE_MANY: &str = include_str!("../../queries/mariadb/inbox_complete_many.sql");

/// How many times an inbox operation runs when InnoDB aborts it on a deadlock (it changed
/// nothing then).
const INBOX_TRIES: u32 = 3;

/// The oldest MariaDB `migrate` accepts: 10.6, the first with `SKIP LOCKED`.
const OLDEST_SERVER: (u32, u32) = (10, 6);

/// How long a migration waits for another replica's migration, and how long it keeps trying
/// a statement of the script on a table that another transaction holds.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause between two tries of a statement of the migration script that gave up waiting
/// for the table's metadata lock (the script bounds each wait): the claims queued behind the
/// try run meanwhile.
const BUSY_TABLE_PAUSE: Duration = Duration::from_secs(1);

/// The table's columns, in lower case.
async fn columns(
    connection: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    table: &crate::TableName,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(statement(COLUMNS)))
        .bind(table.as_str())
        .fetch_all(&mut **connection)
        .await?;
    Ok(rows.into_iter().map(|(column,)| column).collect())
}

impl Dialect for MariaDb {
    type Database = sqlx::MySql;
}

impl Sealed for MariaDb {
    const MAX_CONNECTIONS: u32 = 16;
    // Every write grouped by default but today's mode's claims, each in its own commit
    // (`GroupCommit::MARIADB`, grouping the claims too, is opt-in): see its docs.
    const GROUP_COMMIT: GroupCommit = GroupCommit::MARIADB.with_claims_alone(true);
    // InnoDB counts lock waits in whole seconds: a group waits for none (`claim_many.sql`).
    const GROUP_LOCK_TIMEOUT: Option<Duration> = Some(Duration::ZERO);
    const LONE_WRITE_BY_CALLER: bool = true;
    // In a prepared statement MariaDB reads each parameter of a table value constructor
    // (`VALUES (?, ?), …`) as an empty string (checked on 10.11): rows are `SELECT`s.
    const MANY_ROWS: ManyRows = ManyRows {
        open: "SELECT ",
        close: "",
        between: " UNION ALL ",
    };
    const MANY: Option<ManyTemplates> = Some(ManyTemplates {
        claim: include_str!("../../queries/mariadb/claim_many.sql"),
        claim_by_owner: true,
        state: None,
        complete: include_str!("../../queries/mariadb/complete_many.sql"),
        receive: Some(include_str!("../../queries/mariadb/inbox_receive_many.sql")),
        receive_numbers: Some(include_str!(
            "../../queries/mariadb/inbox_receive_numbers.sql"
        )),
        // The workers' takes and completions are served in turns (`inbox_taken`,
        // `inbox_completed`).
        inbox_complete: None,
        inbox_take: None,
    });
    const GROUP_RECEIPTS_WITHOUT_KEY: bool = true;
    // Inbox mode's statements here run in transactions and session locks of their own.
    const GROUP_INBOX: bool = false;
    const SQL: Templates = Templates {
        claim: include_str!("../../queries/mariadb/claim.sql"),
        claim_binds: &[0, 1, 2, 3, 3, 2],
        state: None,
        renew: include_str!("../../queries/mariadb/renew.sql"),
        complete: include_str!("../../queries/mariadb/complete.sql"),
        release: include_str!("../../queries/mariadb/release.sql"),
        purge: &[
            include_str!("../../queries/mariadb/purge_expired.sql"),
            include_str!("../../queries/mariadb/purge_unexpiring.sql"),
        ],
        adopt: &[],
        cron_purge: include_str!("../../queries/mariadb/cron_purge.sql"),
        schema: include_str!("../../migrations/mariadb.sql"),
        inbox: Some(InboxTemplates {
            receive: (
                include_str!("../../queries/mariadb/inbox_receive.sql"),
                &[0, 1, 2, 3, 4, 5],
            ),
            receive_taken: Some((
                include_str!("../../queries/mariadb/inbox_receive_taken.sql"),
                &[0, 1, 6, 2, 3, 4, 7],
            )),
            // Run statement by statement for a turn of takes (`take_many`), with binds of its own.
            take: (
                include_str!("../../queries/mariadb/inbox_take_many.sql"),
                &[0, 1, 2],
            ),
            renew: (
                include_str!("../../queries/mariadb/inbox_renew.sql"),
                &[0, 1, 2],
            ),
            complete: (
                include_str!("../../queries/mariadb/inbox_complete.sql"),
                &[2, 0, 1],
            ),
            fail: (
                include_str!("../../queries/mariadb/inbox_fail.sql"),
                &[0, 1, 2, 3, 4],
            ),
            abandon: (
                include_str!("../../queries/mariadb/inbox_abandon.sql"),
                &[0, 1],
            ),
            state: (include_str!("../../queries/mariadb/inbox_state.sql"), &[0]),
            stats: (include_str!("../../queries/mariadb/inbox_stats.sql"), &[]),
            gauges: (include_str!("../../queries/mariadb/inbox_gauges.sql"), &[]),
            stats_by_type: (
                include_str!("../../queries/mariadb/inbox_stats_by_type.sql"),
                &[],
            ),
            list: (
                include_str!("../../queries/mariadb/inbox_list.sql"),
                &[0, 0, 1, 1, 2, 2, 3, 3, 5, 5, 4],
            ),
            count: (
                include_str!("../../queries/mariadb/inbox_count.sql"),
                &[0, 0, 1, 1, 2, 2, 3, 3, 5, 5],
            ),
            show: (include_str!("../../queries/mariadb/inbox_show.sql"), &[0]),
            replay: (
                include_str!("../../queries/mariadb/inbox_replay.sql"),
                &[0, 1, 2],
            ),
            discard: (
                include_str!("../../queries/mariadb/inbox_discard.sql"),
                &[0],
            ),
        }),
    };

    fn is_conflict(error: &dyn DatabaseError) -> bool {
        // ER_LOCK_DEADLOCK. Not ER_LOCK_WAIT_TIMEOUT (1205): the claim's lock timeout ran out.
        error
            .try_downcast_ref::<MySqlDatabaseError>()
            .is_some_and(|error| error.number() == 1213)
    }

    async fn migrate(store: &SqlStore<Self>) -> Result<(), Error> {
        let table = store.table();
        let mut connection = store.pool().acquire().await?;
        check_server(&mut connection).await?;
        let present = columns(&mut connection, table).await?;
        refuse_unusable(table, &present)?;
        let [queue, lease_ends, new_events, key_order] = table.inbox_index_names();
        let (ready,): (i64,) = sqlx::query_as(AssertSqlSafe(statement(INDEXES)))
            .bind(table.as_str())
            .bind(table.index_name())
            .bind(table.expiry_index_name())
            .bind(queue)
            .bind(lease_ends)
            .bind(new_events)
            .bind(key_order)
            .bind(table.sequence_name())
            .bind(table.as_str())
            .fetch_one(&mut *connection)
            .await?;
        if has_store_columns(&present) && ready == 8 {
            return Ok(());
        }
        let (locked,): (Option<i64>,) = sqlx::query_as(AssertSqlSafe(statement(MIGRATION_LOCK)))
            .bind(table.as_str())
            .bind(MIGRATION_LOCK_TIMEOUT.as_secs() as i64)
            .fetch_one(&mut *connection)
            .await?;
        if locked != Some(1) {
            return Err(Error::MigrationLocked {
                table: table.as_str().to_owned(),
                waited: MIGRATION_LOCK_TIMEOUT,
            });
        }
        let migrated = async {
            // Another replica may have migrated meanwhile: look again, under the lock.
            refuse_unusable(table, &columns(&mut connection, table).await?)?;
            // A TIMESTAMP `processed_at` of an adopted table reads as UTC.
            connection
                .execute(AssertSqlSafe(statement(MIGRATION_TIME_ZONE)))
                .await?;
            let script = store.schema().replace(
                "INTERVAL 72 HOUR",
                &format!("INTERVAL {} MICROSECOND", micros(store.adopted_retention())),
            );
            let deadline = tokio::time::Instant::now() + MIGRATION_LOCK_TIMEOUT;
            let mut result = Ok(());
            for statement in statements(&script) {
                result = run_when_free(&mut connection, table, &statement, deadline).await;
                if result.is_err() {
                    break;
                }
            }
            connection
                .execute(AssertSqlSafe(statement(MIGRATION_TIME_ZONE_RESTORE)))
                .await?;
            result
        }
        .await;
        sqlx::query(AssertSqlSafe(statement(MIGRATION_UNLOCK)))
            .bind(table.as_str())
            .execute(&mut *connection)
            .await?;
        migrated
    }

    async fn inbox_text<'a>(
        store: &'a SqlStore<Self>,
        query: &'a Query,
        binds: &'a [Bind<'a>],
    ) -> Result<Option<String>, sqlx::Error> {
        let mut connection = store.pool().acquire().await?;
        inbox_text_on(&mut connection, query, binds).await
    }

    async fn inbox_in_key_order<'a>(
        store: &'a SqlStore<Self>,
        query: &'a Query,
        binds: &'a [Bind<'a>],
        key: KeyOf<'a>,
    ) -> Result<Option<String>, sqlx::Error> {
        let (given, event_id) = match key {
            KeyOf::Receipt(None) => return Self::inbox_text(store, query, binds).await,
            KeyOf::Receipt(Some(key)) => (Some(key), None),
            KeyOf::Replay(event_id) => (None, Some(event_id)),
        };
        let mut session = KeyLockSession::new(store.pool().acquire().await?);
        let lock = statement(KEY_LOCK).replace("{table}", store.table().as_str());
        let locked: Option<i64> = sqlx::query_scalar(AssertSqlSafe(lock))
            .bind(given)
            .bind(event_id)
            .bind(micros(store.lock_timeout()))
            .fetch_one(session.connection())
            .await?;
        let answer = match locked {
            Some(1) => inbox_text_on(session.connection(), query, binds).await,
            _ => Err(key_lock_timed_out(store.lock_timeout())),
        };
        session.unlock().await?;
        answer
    }

    async fn inbox_completed<'a>(
        store: &'a SqlStore<Self>,
        query: &'a Query,
        binds: &'a [Bind<'a>],
    ) -> Result<bool, StoreError> {
        let completion = Completion::of(binds);
        let runner = || {
            let many = statements_for(store.table(), COMPLETE_MANY);
            let statements = std::iter::once(query.sql.clone()).chain(many).collect();
            on_kept_connection(store.pool().clone(), statements, complete_many, is_deadlock)
        };
        let completions = &store.inbox_turns().completions;
        match completions.call(completion, runner).await {
            Ok(completed) => Ok(completed.is_some()),
            // Another transaction held a row of the turn: each completion runs alone, and
            // only the held one waits for it, under InnoDB's lock wait timeout, as it would
            // alone.
            Err(error) if waited_too_long_on(error.database_error()) => {
                Self::inbox_text(store, query, binds)
                    .await
                    .map(|completed| completed.is_some())
                    .map_err(|error| store.store_error(error))
            }
            Err(error) => Err(store.write_error(error)),
        }
    }

    async fn inbox_taken<'a>(
        store: &'a SqlStore<Self>,
        query: &'a Query,
        binds: &'a [Bind<'a>],
    ) -> Result<Option<TakenRow>, WriteError> {
        let take = Take::of(binds);
        let runner = || {
            let statements = std::iter::once(query.sql.clone())
                .chain(query.then.iter().cloned())
                .collect();
            on_kept_connection(store.pool().clone(), statements, take_many, is_deadlock)
        };
        store.inbox_turns().takes.call(take, runner).await
    }

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let mut connection = store.pool().acquire().await?;
        let [expired, unexpiring] = &store.queries().purge[..] else {
            unreachable!("two purge files")
        };
        let expired = sqlx::query(AssertSqlSafe(settings(&mut connection, expired).await?))
            .bind(batch)
            .execute(&mut *connection)
            .await?
            .rows_affected();
        let unexpiring = sqlx::query(AssertSqlSafe(settings(&mut connection, unexpiring).await?))
            .bind(micros(retention))
            .bind(batch)
            .execute(&mut *connection)
            .await?
            .rows_affected();
        Ok(expired + unexpiring)
    }
}

/// Runs `statement` of the migration script, again after [`BUSY_TABLE_PAUSE`] each time it
/// gave up waiting for the table's metadata lock (another transaction held the table: error
/// 1205 after its `lock_wait_timeout`, or 1969 after its `max_statement_time`), until
/// `deadline`. Every statement of the script is safe to run again.
async fn run_when_free(
    connection: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    table: &crate::TableName,
    statement: &str,
    deadline: tokio::time::Instant,
) -> Result<(), Error> {
    loop {
        match connection
            .execute(AssertSqlSafe(statement.to_owned()))
            .await
        {
            Err(sqlx::Error::Database(error)) if waited_too_long(&*error) => {
                if tokio::time::Instant::now() + BUSY_TABLE_PAUSE > deadline {
                    return Err(Error::TableBusy {
                        table: table.as_str().to_owned(),
                        waited: MIGRATION_LOCK_TIMEOUT,
                    });
                }
                tokio::time::sleep(BUSY_TABLE_PAUSE).await;
            }
            other => return other.map(drop).map_err(Error::from),
        }
    }
}

/// Whether a statement gave up on a lock wait: ER_LOCK_WAIT_TIMEOUT (1205) or
/// ER_STATEMENT_TIMEOUT (1969).
fn waited_too_long(error: &dyn DatabaseError) -> bool {
    error
        .try_downcast_ref::<MySqlDatabaseError>()
        .is_some_and(|error| matches!(error.number(), 1205 | 1969))
}

/// Whether a statement gave up on a lock wait (see [`waited_too_long`]).
fn waited_too_long_on(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(error) if waited_too_long(&**error))
}

/// Whether InnoDB aborted the statement (or its transaction) on a deadlock.
fn is_deadlock(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(error) if MariaDb::is_conflict(&**error))
}

/// Runs one of inbox mode's statements with its operation's `binds` on `connection`: the file's
/// one statement, or its statements in one transaction (see [`inbox_transaction`]), again when
/// InnoDB aborts it on a deadlock; the first column of its answer's first row, if any.
async fn inbox_text_on(
    connection: &mut MySqlConnection,
    query: &Query,
    binds: &[Bind<'_>],
) -> Result<Option<String>, sqlx::Error> {
    let binds = query.binds(binds);
    let mut tries = 0;
    loop {
        tries += 1;
        let answer = if query.then.is_empty() && is_update(&query.sql) {
            let matched = MySql::execute_in(connection, &query.sql, &binds).await;
            matched.map(|matched| (matched > 0).then(|| matched.to_string()))
        } else if query.then.is_empty() {
            MySql::fetch_text_in(connection, &query.sql, &binds).await
        } else {
            inbox_transaction(connection, query, &binds, |connection, last| {
                Box::pin(MySql::fetch_text_in(connection, last, &[]))
            })
            .await
        };
        match answer {
            Err(error) if is_deadlock(&error) && tries < INBOX_TRIES => continue,
            answer => return answer,
        }
    }
}

/// A turn of completions (one or more): all of them by `inbox_complete_many.sql` (the second
/// of `statements`), one statement committed on its own. When it matched a row for each (every
/// token held its event: the usual turn), each is completed; a lone completion that matched
/// none is not held; otherwise each runs again alone by `inbox_complete.sql` (the first), which
/// completes nothing twice and answers exactly as it does alone: completed by its token (now
/// or by the turn), or not held. The statement of many never waits for a row lock: if another
/// transaction holds a row, the turn fails at once, and each completion runs alone, outside the
/// turns (`inbox_completed`): only the held one waits, and no turn waits behind it.
fn complete_many<'c>(
    connection: &'c mut MySqlConnection,
    statements: &'c [Arc<str>],
    completions: &'c [Completion],
) -> TurnOn<'c, ()> {
    Box::pin(async move {
        let update = sqlx::query(listed(&statements[1], completions.len()));
        let matched = bind_pairs(update.bind(completions[0].retention), completions)
            .execute(&mut *connection)
            .await?
            .rows_affected();
        if matched == completions.len() as u64 {
            return Ok(vec![Some(()); completions.len()]);
        }
        if let [_] = completions {
            return Ok(vec![None]);
        }
        let mut answers = Vec::with_capacity(completions.len());
        for completion in completions {
            let matched = sqlx::query(AssertSqlSafe(statements[0].to_string()))
                .bind(completion.retention)
                .bind(completion.event_id.as_str())
                .bind(completion.token.as_str())
                .execute(&mut *connection)
                .await?
                .rows_affected();
            answers.push((matched > 0).then_some(()));
        }
        Ok(answers)
    })
}

/// An event a take's search locked: its sequence number, and what the worker gets, with the
/// attempts before this take's.
type Locked = (i64, TakenRow);

/// A row of a take's locking read: the sequence number, then [`TakenRow`]'s columns.
fn locked_row(row: MySqlRow) -> Result<Locked, sqlx::Error> {
    let taken = (
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
        row.try_get(5)?,
        row.try_get(6)?,
        row.try_get(7)?,
        row.try_get(8)?,
        row.try_get(9)?,
    );
    Ok((row.try_get(0)?, taken))
}

/// A turn of takes, in one transaction on `connection`, by `inbox_take_many.sql` (its
/// statements are numbered as in the file): an event for each of the first takes, under its
/// token, as many as were due.
fn take_many<'c>(
    connection: &'c mut MySqlConnection,
    statements: &'c [Arc<str>],
    takes: &'c [Take],
) -> TurnOn<'c, TakenRow> {
    Box::pin(take_many_in(connection, statements, takes))
}

async fn take_many_in(
    connection: &mut MySqlConnection,
    statements: &[Arc<str>],
    takes: &[Take],
) -> Answered<TakenRow> {
    let sql = |number: usize| AssertSqlSafe(statements[number - 1].to_string());
    let most = takes.len();
    let (lease, fresh_first) = (takes[0].lease, takes[0].fresh_first);
    let mut transaction = begin_inbox_transaction(connection).await?;
    let mut locked: Vec<Locked> = Vec::new();
    if fresh_first {
        let from: Option<i64> = sqlx::query_scalar(sql(1))
            .fetch_optional(&mut *transaction)
            .await?;
        if let Some(from) = from {
            locked = sqlx::query(sql(2))
                .bind(from)
                .bind(most as i64)
                .try_map(locked_row)
                .fetch_all(&mut *transaction)
                .await?;
        }
    }
    if locked.is_empty() {
        let (due_from, lost): (Option<i64>, Option<String>) =
            sqlx::query_as(sql(3)).fetch_one(&mut *transaction).await?;
        if let Some(lost) = lost {
            let lost: Option<Locked> = sqlx::query(sql(4))
                .bind(lost)
                .try_map(locked_row)
                .fetch_optional(&mut *transaction)
                .await?;
            locked.extend(lost);
        }
        if let (Some(from), room @ 1..) = (due_from, most - locked.len()) {
            let due: Vec<Locked> = sqlx::query(sql(5))
                .bind(from)
                .bind(room as i64)
                .try_map(locked_row)
                .fetch_all(&mut *transaction)
                .await?;
            locked.extend(due);
        }
    }
    if locked.iter().any(|(_, taken)| taken.8.is_some()) {
        let ids: Vec<&str> = locked.iter().map(|(_, taken)| taken.0.as_str()).collect();
        let held: Vec<(String,)> =
            bind_ids(sqlx::query_as(listed(&statements[5], ids.len())), &ids)
                .fetch_all(&mut *transaction)
                .await?;
        locked.retain(|(_, taken)| !held.iter().any(|(held,)| *held == taken.0));
    }
    if locked.is_empty() {
        transaction.commit().await?;
        return Ok(Vec::new());
    }
    locked.sort_by_key(|(sequence, _)| *sequence);
    let ids: Vec<&str> = locked.iter().map(|(_, taken)| taken.0.as_str()).collect();
    let mut update = sqlx::query(listed(&statements[6], ids.len()));
    for (id, take) in ids.iter().zip(takes) {
        update = update.bind(*id).bind(take.token.as_str());
    }
    for _ in ids.len()..ids.len().next_power_of_two() {
        update = update.bind(None::<&str>).bind(None::<&str>);
    }
    bind_ids(update.bind(lease), &ids)
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await?;
    // What the locking reads answered, with the attempt the `UPDATE` counted.
    Ok(locked
        .into_iter()
        .map(|(_, mut taken)| {
            taken.7 += 1;
            Some(taken)
        })
        .collect())
}

/// `sql` with its lists for `count` events, padded to the next power of two (few statements
/// to prepare): `{ids}`, a placeholder each, `{tokens}`, `WHEN ? THEN ?` each, and `{pairs}`,
/// `(?, ?)` each, at least two ([`pairs`]).
fn listed(sql: &str, count: usize) -> AssertSqlSafe<String> {
    let ids = count.next_power_of_two();
    AssertSqlSafe(
        sql.replace("{ids}", &vec!["?"; ids].join(", "))
            .replace("{tokens}", &vec!["WHEN ? THEN ?"; ids].join(" "))
            .replace("{pairs}", &vec!["(?, ?)"; pairs(count)].join(", ")),
    )
}

/// How many `(?, ?)` a list of `count` pairs holds: the next power of two, and at least two.
/// MariaDB reads `(a, b) IN ((?, ?))` of one pair by scanning the whole table, and `IN` of two
/// or more by the index.
fn pairs(count: usize) -> usize {
    count.max(2).next_power_of_two()
}

/// `query` with each completion's event id and token bound, then NULL pairs up to
/// [`pairs`].
fn bind_pairs<'q, Q: BindText<'q>>(query: Q, completions: &'q [Completion]) -> Q {
    let padding = pairs(completions.len()) - completions.len();
    let query = completions.iter().fold(query, |query, completion| {
        query
            .bind_text(Some(&completion.event_id))
            .bind_text(Some(&completion.token))
    });
    (0..padding).fold(query, |query, _| query.bind_text(None).bind_text(None))
}

/// `query` with `ids` bound, then NULL up to the next power of two (see [`listed`]).
fn bind_ids<'q, Q: BindText<'q>>(query: Q, ids: &[&'q str]) -> Q {
    let padding = ids.len().next_power_of_two() - ids.len();
    let query = ids
        .iter()
        .fold(query, |query, id| query.bind_text(Some(id)));
    (0..padding).fold(query, |query, _| query.bind_text(None))
}

/// A query that binds a text or NULL.
trait BindText<'q> {
    fn bind_text(self, text: Option<&'q str>) -> Self;
}

impl<'q> BindText<'q> for sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments> {
    fn bind_text(self, text: Option<&'q str>) -> Self {
        self.bind(text)
    }
}

impl<'q, O> BindText<'q> for sqlx::query::QueryAs<'q, MySql, O, sqlx::mysql::MySqlArguments> {
    fn bind_text(self, text: Option<&'q str>) -> Self {
        self.bind(text)
    }
}

/// Whether `sql` is an `UPDATE`: MariaDB has no `UPDATE … RETURNING`, so an inbox operation of
/// one `UPDATE` answers by the rows it matched (the number, or `None` for none). sqlx connects
/// with `CLIENT_FOUND_ROWS`: a matched row counts even when the statement left it unchanged.
fn is_update(sql: &str) -> bool {
    sql.trim_start()
        .get(..6)
        .is_some_and(|verb| verb.eq_ignore_ascii_case("update"))
}

/// A connection of the pool whose session may hold an ordering key's lock ([`KEY_LOCK`]): a
/// lock of the session, not of a transaction, which no rollback releases. The connection goes
/// back to the pool only once [`unlock`](Self::unlock) ran; dropped before (an error, or a
/// receipt cancelled half-way), it is closed instead, and its lock ends with its session.
struct KeyLockSession {
    connection: PoolConnection<MySql>,
    unlocked: bool,
}

impl KeyLockSession {
    fn new(connection: PoolConnection<MySql>) -> Self {
        Self {
            connection,
            unlocked: false,
        }
    }

    fn connection(&mut self) -> &mut MySqlConnection {
        &mut self.connection
    }

    /// Releases the key's lock, if the session holds it, and lets the connection go back to
    /// the pool.
    async fn unlock(mut self) -> Result<(), sqlx::Error> {
        self.connection
            .execute(AssertSqlSafe(statement(KEY_UNLOCK)))
            .await?;
        self.unlocked = true;
        Ok(())
    }
}

impl Drop for KeyLockSession {
    fn drop(&mut self) {
        if !self.unlocked {
            self.connection.close_on_drop();
        }
    }
}

/// The error of a receipt or a replay that waited for its ordering key's lock (another receipt
/// or replay of the key held it) for longer than the store's lock timeout.
fn key_lock_timed_out(timeout: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the ordering key's lock was not free within the lock timeout ({timeout:?})"),
    ))
}

/// The answer of an inbox operation's last statement, read on the transaction's connection.
type Answer<'c, T> = std::pin::Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

/// Runs an inbox operation of several statements in one transaction at READ COMMITTED on
/// `connection`: its first statement with `binds` (they go into session variables), the next
/// ones without, and its last one through `answer`; commits, and answers what `answer` read.
async fn inbox_transaction<T>(
    connection: &mut MySqlConnection,
    query: &Query,
    binds: &[Bind<'_>],
    answer: impl for<'c> FnOnce(&'c mut MySqlConnection, &'c Arc<str>) -> Answer<'c, T>,
) -> Result<T, sqlx::Error> {
    let (last, middle) = query.then.split_last().expect("statements after the first");
    let mut transaction = begin_inbox_transaction(connection).await?;
    transaction
        .execute(row_query::<MySql, (i64,)>(&query.sql, binds))
        .await?;
    for statement in middle {
        transaction
            .execute(AssertSqlSafe(statement.clone()))
            .await?;
    }
    let answer = answer(&mut transaction, last).await?;
    transaction.commit().await?;
    Ok(answer)
}

/// Begins an inbox operation's transaction on `connection`, at READ COMMITTED
/// ([`INBOX_TRANSACTION`]), in one round trip: the isolation level and `START TRANSACTION` in
/// one text.
async fn begin_inbox_transaction(
    connection: &mut MySqlConnection,
) -> Result<sqlx::Transaction<'_, MySql>, sqlx::Error> {
    let begin = format!("{}; START TRANSACTION", statement(INBOX_TRANSACTION));
    connection.begin_with(AssertSqlSafe(begin)).await
}

/// Refuses a server older than [`OLDEST_SERVER`], and logs an error for each setting with
/// which a committed receipt can be lost in a crash of the server.
async fn check_server(
    connection: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
) -> Result<(), Error> {
    let (version, flush, binlog, sync_binlog): (String, i64, i64, i64) =
        sqlx::query_as(AssertSqlSafe(statement(SERVER)))
            .fetch_one(&mut **connection)
            .await?;
    if server_version(&version).is_none_or(|found| found < OLDEST_SERVER) {
        return Err(Error::UnsupportedServer { version });
    }
    if flush != 1 {
        tracing::error!(
            innodb_flush_log_at_trx_commit = flush,
            "MariaDB's innodb_flush_log_at_trx_commit is {flush}, not 1: a commit is not flushed \
             to disk before it answers, so an acknowledged inbox receipt (and a claim or a \
             completion) can be lost in a crash of the server; set it to 1"
        );
    }
    if binlog != 0 && sync_binlog != 1 {
        tracing::error!(
            sync_binlog,
            "MariaDB's binary log is on and sync_binlog is {sync_binlog}, not 1: a commit's \
             binary log is not synced before it answers, so an acknowledged inbox receipt (and \
             a claim or a completion) can be lost in a crash of the server; set it to 1"
        );
    }
    Ok(())
}

/// The major and minor version of a MariaDB server's `VERSION()` (`10.11.9-MariaDB-…`); `None`
/// for a server that is not MariaDB.
fn server_version(version: &str) -> Option<(u32, u32)> {
    if !version.contains("MariaDB") {
        return None;
    }
    let mut parts = version.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Runs every statement of `file` but its last on `connection` (the settings of its
/// transaction): the last one.
async fn settings(
    connection: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    file: &[Arc<str>],
) -> Result<Arc<str>, sqlx::Error> {
    let (last, settings) = file.split_last().expect("a statement");
    for setting in settings {
        connection.execute(AssertSqlSafe(setting.clone())).await?;
    }
    Ok(last.clone())
}

/// [`MariaDbStore`](crate::MariaDbStore)'s own constructor.
impl SqlStore<MariaDb> {
    /// Connects to `url` (`mysql://user:password@host:port/database`, or `mariadb://…`) with a
    /// pool of at most [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections and an acquire
    /// (and connect) timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT), and opens one
    /// connection to check the URL. Each connection runs at READ COMMITTED (InnoDB's default
    /// is REPEATABLE READ, whose gap locks make concurrent claims deadlock more often), in the
    /// time zone UTC.
    ///
    /// On a pool of your own ([`new`](SqlStore::new)) the store leaves the session alone; a
    /// claim that InnoDB aborts on a deadlock (error 1213) lost a race for the event and is
    /// answered as in flight (409), never as a store failure. A claim whose lock wait ran out
    /// ([`with_lock_timeout`](Self::with_lock_timeout), error 1205) is a store failure (503).
    ///
    /// Durability is the server's: with InnoDB's default `innodb_flush_log_at_trx_commit = 1`
    /// (and `sync_binlog = 1` when the binary log is on) every receipt, claim, renewal and
    /// completion is flushed to disk before it answers; [`migrate`](SqlStore::migrate) logs an
    /// error for any other value (see [`MariaDbStore`](crate::MariaDbStore#the-server)).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid or the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options: MySqlConnectOptions = url.parse()?;
        let pool = MySqlPoolOptions::new()
            .max_connections(Self::MAX_CONNECTIONS)
            .acquire_timeout(Self::ACQUIRE_TIMEOUT)
            .after_connect(|connection, _| {
                Box::pin(async move {
                    for setting in statements(SESSION) {
                        connection.execute(AssertSqlSafe(setting)).await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        Ok(Self::new(pool))
    }

    /// How long a claim or a renewal waits for a lock held by another transaction (the event's
    /// row, or the table during a migration's `ALTER TABLE`) before it fails with error 1205;
    /// the default is [`LOCK_TIMEOUT`](SqlStore::LOCK_TIMEOUT), 2 s. MariaDB counts these
    /// waits in whole seconds: rounded up, at least 1 s.
    ///
    /// The claim and renew statements run as `SET STATEMENT innodb_lock_wait_timeout = …,
    /// lock_wait_timeout = … FOR …`: still one round trip, on a pool of your own as on
    /// [`connect`](Self::connect)'s, and the session's own settings (InnoDB's default is 50 s)
    /// stay as they are for every other statement, your transactions included.
    ///
    /// Keep it below the layer's store timeout minus the pool's acquire timeout (5 s − 3 s
    /// with the defaults): a claim the layer gave up on while it waited for a lock would
    /// otherwise land after the layer released it, and block the event with 409 for a lease
    /// (see [Lock waits](SqlStore#lock-waits)).
    #[must_use]
    pub fn with_lock_timeout(self, timeout: Duration) -> Self {
        self.set_lock_timeout(timeout)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_script_splits_into_its_statements() {
        let statements =
            crate::queries::statements(<super::MariaDb as crate::dialect::Sealed>::SQL.schema);
        assert_eq!(statements.len(), 13);
        assert!(statements[0].starts_with("CREATE TABLE IF NOT EXISTS"));
        // Each statement that takes the table's exclusive metadata lock waits for it briefly.
        assert!(statements[1].starts_with("SET STATEMENT lock_wait_timeout = 1 FOR\nALTER TABLE"));
        // Inbox mode's columns, then its generated state, then the state's check.
        for instant in &statements[2..5] {
            assert!(instant.starts_with("SET STATEMENT max_statement_time = 0.5 FOR\nALTER TABLE"));
            assert!(instant.ends_with("ALGORITHM = INSTANT"));
        }
        assert!(statements[3].contains("ADD COLUMN IF NOT EXISTS inbox_state"));
        assert!(statements[5].starts_with("CREATE SEQUENCE IF NOT EXISTS"));
        assert!(statements[6].starts_with("UPDATE"));
        assert!(statements[6].ends_with("WHERE expires_at IS NULL AND received_at IS NULL"));
        for index in &statements[7..] {
            assert!(index.starts_with(
                "SET STATEMENT lock_wait_timeout = 1 FOR\nCREATE INDEX IF NOT EXISTS"
            ));
        }
    }

    #[test]
    fn the_server_s_version_is_read_from_version() {
        use super::server_version;
        assert_eq!(server_version("10.11.19-MariaDB-0+deb12u1"), Some((10, 11)));
        assert_eq!(server_version("10.6.4-MariaDB"), Some((10, 6)));
        assert_eq!(server_version("11.4.2-MariaDB-log"), Some((11, 4)));
        assert_eq!(server_version("10.5.27-MariaDB"), Some((10, 5)));
        assert!(server_version("10.5.27-MariaDB").unwrap() < super::OLDEST_SERVER);
        assert_eq!(server_version("8.0.36"), None);
    }

    #[test]
    fn every_inbox_operation_of_several_statements_binds_only_its_first() {
        let inbox = <super::MariaDb as crate::dialect::Sealed>::SQL
            .inbox
            .unwrap();
        for (file, _) in [inbox.renew, inbox.fail, inbox.abandon, inbox.replay] {
            let statements = crate::queries::statements(file);
            assert!(statements[0].starts_with("SET @sangho_"), "{file}");
            assert!(
                statements[1..]
                    .iter()
                    .all(|statement| !statement.contains('?')),
                "{file}"
            );
        }
    }

    #[test]
    fn a_turn_of_takes_runs_the_seven_numbered_statements_with_its_lists_padded() {
        let inbox = <super::MariaDb as crate::dialect::Sealed>::SQL
            .inbox
            .unwrap();
        let statements = crate::queries::statements(inbox.take.0);
        assert_eq!(statements.len(), 7);
        assert!(statements[0].contains("LIMIT 1"));
        // The locking reads answer what the workers get: no statement reads it back.
        for number in [2, 4, 5] {
            let read = &statements[number - 1];
            assert!(read.contains("SKIP LOCKED"), "statement {number}");
            assert!(read.contains("body, "), "statement {number}");
        }
        assert_eq!(super::listed(&statements[5], 1).0.matches('?').count(), 1);
        assert!(statements[6].starts_with("UPDATE"));
        let update = super::listed(&statements[6], 3).0;
        assert_eq!(update.matches("WHEN ? THEN ?").count(), 4);
        assert_eq!(update.matches('?').count(), 4 * 2 + 1 + 4);
    }

    #[test]
    fn a_turn_of_completions_writes_each_row_as_one_completion_does() {
        let inbox = <super::MariaDb as crate::dialect::Sealed>::SQL
            .inbox
            .unwrap();
        let set = |sql: &str| {
            let from = sql.find("SET processed_at").expect("the assignments");
            let to = sql.find("WHERE").expect("the condition");
            sql[from..to].to_owned()
        };
        let one = crate::queries::statement(inbox.complete.0);
        let many = crate::queries::statement(super::COMPLETE_MANY);
        assert_eq!(set(&one), set(&many));
        let condition = "AND state IN ('in_flight', 'completed') AND received_at IS NOT NULL";
        assert!(one.ends_with(condition) && many.ends_with(condition));
    }

    #[test]
    fn only_an_update_answers_by_the_rows_it_matched() {
        assert!(super::is_update("UPDATE t SET a = 1"));
        assert!(super::is_update("  update t SET a = 1"));
        assert!(!super::is_update("SELECT 1"));
        assert!(!super::is_update("UPD"));
    }

    #[tokio::test]
    #[ignore = "needs MariaDB: run with --include-ignored; URL from SANGHO_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test)"]
    async fn a_turn_of_any_number_of_completions_reads_its_rows_by_the_primary_key() {
        use sqlx::{AssertSqlSafe, Connection as _, Row as _};
        let url = std::env::var("SANGHO_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
        let mut connection = sqlx::MySqlConnection::connect(&url).await.unwrap();
        let table = "processed_webhook_events";
        let schema = include_str!("../../migrations/mariadb.sql")
            .replace("CREATE TABLE IF NOT EXISTS", "CREATE TEMPORARY TABLE");
        let create = crate::queries::statements(&schema).remove(0);
        sqlx::raw_sql(AssertSqlSafe(create))
            .execute(&mut connection)
            .await
            .unwrap();
        let fill = format!(
            "INSERT INTO {table} (event_id, event_type, state, claim_token, received_at) \
             SELECT CONCAT('evt_', seq), 't', 'in_flight', 'token', UTC_TIMESTAMP(6) \
             FROM seq_1_to_2000"
        );
        sqlx::raw_sql(AssertSqlSafe(fill))
            .execute(&mut connection)
            .await
            .unwrap();
        let many = crate::queries::statements(super::COMPLETE_MANY).remove(0);
        let update = many
            .replace("{table}", table)
            .replace("SET STATEMENT innodb_lock_wait_timeout = 0 FOR\n", "");
        for count in 1..=5 {
            let listed = super::listed(&update, count).0;
            let mut literals = std::iter::once("1000".to_owned())
                .chain((0..).map(|n| format!("'evt_{}'", n / 2 + 1)));
            let explained: String = listed
                .split('?')
                .enumerate()
                .map(|(n, part)| match n {
                    0 => part.to_owned(),
                    _ => literals.next().unwrap() + part,
                })
                .collect();
            let plan = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN {explained}")))
                .fetch_one(&mut connection)
                .await
                .unwrap();
            let access: String = plan.try_get("type").unwrap();
            assert_eq!(access, "range", "{count} completions: {explained}");
        }
    }
}
