//! PostgreSQL: [`PostgresStore`](crate::PostgresStore).

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use std::sync::atomic::Ordering;

use sangho_webhook::store::StoreError;
use tokio::sync::Notify;

use sqlx::{
    AssertSqlSafe, Connection, Executor, FromRow, PgPool, Row,
    error::DatabaseError,
    postgres::{PgConnectOptions, PgListener, PgPoolOptions},
};

use super::{
    Bind, Dialect, InboxTemplates, Sealed, TakenRow, has_store_columns, micros, refuse_unusable,
    sealed::{ManyTemplates, Templates},
};
use crate::{
    Error, GroupCommit, SqlStore, TableName,
    group_commit::WriteError,
    queries::{Query, statement, statements, statements_for},
    store::Notifier,
    turns::{Completion, Take, TurnOn, on_kept_connection},
};

/// The PostgreSQL dialect (feature `postgres`): [`PostgresStore`](crate::PostgresStore).
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

/// The table's columns (none: no table).
const COLUMNS: &str = include_str!("../../queries/postgres/columns.sql");

/// Whether the table is up to date besides its columns.
const TABLE_STATE: &str = include_str!("../../queries/postgres/table_state.sql");

/// Takes and gives back the lock of the concurrent index builds.
const INDEX_LOCK: &str = include_str!("../../queries/postgres/index_lock.sql");
const INDEX_UNLOCK: &str = include_str!("../../queries/postgres/index_unlock.sql");

/// The isolation level of the store's own connections.
const SESSION: &str = include_str!("../../queries/postgres/session.sql");

/// Serialises concurrent `migrate()` calls, waiting at most [`MIGRATION_LOCK_TIMEOUT`].
const MIGRATION_LOCK: &str = include_str!("../../queries/postgres/migration_lock.sql");

/// The log level of the migration script's run.
const UPGRADE_SETTINGS: &str = include_str!("../../queries/postgres/upgrade_settings.sql");

/// Whether an index is missing, invalid (a `CREATE INDEX CONCURRENTLY` that failed) or valid.
const INDEX_STATE: &str = include_str!("../../queries/postgres/index_state.sql");

/// Completes the events of a turn of completions (see [`complete_many`]).
const COMPLETE_MANY: &str = include_str!("../../queries/postgres/inbox_complete_many.sql");

/// Wakes the inbox workers of other processes.
const NOTIFY: &str = include_str!("../../queries/postgres/inbox_notify.sql");

/// Drops the unfinished events' index when it is invalid.
const DROP_INVALID_INDEX: &str = include_str!("../../queries/postgres/drop_invalid_index.sql");

/// The line of the migration script after which its statements run outside a transaction.
const OUTSIDE_A_TRANSACTION: &str = "-- Outside a transaction";

/// How long a migration waits for another replica's migration, and how long it keeps trying
/// to change a table that another transaction holds.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The pause between two tries of the upgrade on a table another transaction holds (each try
/// waits at most the script's `lock_timeout` of 500 ms): the claims queued behind the try run
/// meanwhile.
const BUSY_TABLE_PAUSE: Duration = Duration::from_secs(1);

/// A turn of takes, by `inbox_take_many.sql`, one statement: an event for each of the first
/// takes, under its token, as many as were due.
fn take_many<'c>(
    connection: &'c mut sqlx::PgConnection,
    statements: &'c [Arc<str>],
    takes: &'c [Take],
) -> TurnOn<'c, TakenRow> {
    Box::pin(async move {
        let tokens: Vec<&str> = takes.iter().map(|take| take.token.as_str()).collect();
        let rows = sqlx::query(AssertSqlSafe(statements[0].to_string()))
            .bind(&tokens)
            .bind(takes[0].lease)
            .bind(i64::from(takes[0].fresh_first))
            .fetch_all(&mut *connection)
            .await?;
        // The taken event's columns, then its token's place in the turn (from 1).
        let mut answers: Vec<Option<TakenRow>> = vec![None; rows.len()];
        for row in rows {
            let place: i64 = row.try_get(9)?;
            let at = usize::try_from(place - 1).ok();
            if let Some(answer) = at.and_then(|at| answers.get_mut(at)) {
                *answer = Some(TakenRow::from_row(&row)?);
            }
        }
        Ok(answers)
    })
}

/// A turn of completions, by `inbox_complete_many.sql`, one statement committed on its own:
/// each completion answered as it is alone (completed by its token, now or before, or not
/// held). The statement never waits for a row lock: if another transaction holds a row, the
/// turn fails at once, and each completion runs alone, outside the turns (`inbox_completed`):
/// only the held one waits, and no turn waits behind it.
fn complete_many<'c>(
    connection: &'c mut sqlx::PgConnection,
    statements: &'c [Arc<str>],
    completions: &'c [Completion],
) -> TurnOn<'c, ()> {
    Box::pin(async move {
        let ids: Vec<&str> = completions.iter().map(|c| c.event_id.as_str()).collect();
        let tokens: Vec<&str> = completions.iter().map(|c| c.token.as_str()).collect();
        let completed: Vec<(String, String)> =
            sqlx::query_as(AssertSqlSafe(statements[0].to_string()))
                .bind(&ids)
                .bind(&tokens)
                .bind(completions[0].retention)
                .fetch_all(&mut *connection)
                .await?;
        Ok(completions
            .iter()
            .map(|completion| {
                let mine = (&completion.event_id, &completion.token);
                completed
                    .iter()
                    .any(|(id, token)| (id, token) == mine)
                    .then_some(())
            })
            .collect())
    })
}

/// Whether a statement failed on a row lock another transaction holds (lock_not_available:
/// `NOWAIT`, or the lock timeout).
fn is_held(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(error) if error.code().as_deref() == Some("55P03"))
}

/// Whether PostgreSQL aborted the statement on a conflict (see [`Sealed::is_conflict`]).
fn is_conflict(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(error) if Postgres::is_conflict(&**error))
}

/// The table's columns, in lower case.
async fn columns<'c, E>(executor: E, table: &TableName) -> Result<Vec<String>, sqlx::Error>
where
    E: Executor<'c, Database = sqlx::Postgres>,
{
    sqlx::query_scalar(AssertSqlSafe(statement(COLUMNS)))
        .bind(table.as_str())
        .fetch_all(executor)
        .await
}

impl Dialect for Postgres {
    type Database = sqlx::Postgres;
}

impl Sealed for Postgres {
    const MAX_CONNECTIONS: u32 = 16;
    const GROUP_COMMIT: GroupCommit = GroupCommit::POSTGRES;
    // `BEGIN` and the group's lock timeout in one round trip.
    const GROUP_BEGIN: Option<&'static str> =
        Some(include_str!("../../queries/postgres/group_begin.sql"));
    const GROUP_LOCK_TIMEOUT: Option<Duration> = Some(Duration::from_millis(100));
    const GROUP_ASYNCHRONOUS: bool = false;
    // Measured faster at 64 connections than writers as tasks (BENCHMARKS.md, section 8).
    const GROUP_WRITER_THREAD: bool = true;
    // The hop to the writer's thread and back cost a lone request 0.2 ms (BENCHMARKS.md,
    // section 8).
    const LONE_WRITE_BY_CALLER: bool = true;
    const MANY: Option<ManyTemplates> = Some(ManyTemplates {
        claim: include_str!("../../queries/postgres/claim_many.sql"),
        claim_by_owner: false,
        state: None,
        complete: include_str!("../../queries/postgres/complete_many.sql"),
        receive: Some(include_str!(
            "../../queries/postgres/inbox_receive_many.sql"
        )),
        receive_numbers: None,
        // The workers' completions are served in turns (`inbox_completed`).
        inbox_complete: None,
        inbox_take: None,
    });
    const SQL: Templates = Templates {
        claim: include_str!("../../queries/postgres/claim.sql"),
        claim_binds: &[0, 1, 2, 3],
        state: None,
        renew: include_str!("../../queries/postgres/renew.sql"),
        complete: include_str!("../../queries/postgres/complete.sql"),
        release: include_str!("../../queries/postgres/release.sql"),
        purge: &[include_str!("../../queries/postgres/purge.sql")],
        adopt: &[],
        cron_purge: include_str!("../../queries/postgres/cron_purge.sql"),
        schema: include_str!("../../migrations/postgres.sql"),
        inbox: Some(InboxTemplates {
            receive: (
                include_str!("../../queries/postgres/inbox_receive.sql"),
                &[0, 1, 2, 3, 4, 5],
            ),
            receive_taken: None,
            // A turn of takes (`take_many`), with binds of its own.
            take: (
                include_str!("../../queries/postgres/inbox_take_many.sql"),
                &[0, 1, 2],
            ),
            renew: (
                include_str!("../../queries/postgres/inbox_renew.sql"),
                &[0, 1, 2],
            ),
            complete: (
                include_str!("../../queries/postgres/inbox_complete.sql"),
                &[0, 1, 2],
            ),
            fail: (
                include_str!("../../queries/postgres/inbox_fail.sql"),
                &[0, 1, 2, 3, 4],
            ),
            abandon: (
                include_str!("../../queries/postgres/inbox_abandon.sql"),
                &[0, 1],
            ),
            state: (include_str!("../../queries/postgres/inbox_state.sql"), &[0]),
            stats: (include_str!("../../queries/postgres/inbox_stats.sql"), &[]),
            gauges: (include_str!("../../queries/postgres/inbox_gauges.sql"), &[]),
            stats_by_type: (
                include_str!("../../queries/postgres/inbox_stats_by_type.sql"),
                &[],
            ),
            list: (
                include_str!("../../queries/postgres/inbox_list.sql"),
                &[0, 1, 2, 3, 4, 5],
            ),
            count: (
                include_str!("../../queries/postgres/inbox_count.sql"),
                &[0, 1, 2, 3, 5],
            ),
            show: (include_str!("../../queries/postgres/inbox_show.sql"), &[0]),
            replay: (
                include_str!("../../queries/postgres/inbox_replay.sql"),
                &[0, 1, 2],
            ),
            discard: (
                include_str!("../../queries/postgres/inbox_discard.sql"),
                &[0],
            ),
        }),
    };

    fn placeholder(position: usize, bind: Bind<'_>) -> String {
        // Typed: a statement of many rows binds its rows in `VALUES`, where nothing else
        // tells PostgreSQL their types.
        let of = match bind {
            Bind::Text(_) | Bind::OptText(_) => "text",
            Bind::Int(_) | Bind::OptInt(_) => "bigint",
            Bind::Bytes(_) => "bytea",
        };
        format!("${position}::{of}")
    }

    fn is_conflict(error: &dyn DatabaseError) -> bool {
        // serialization_failure, deadlock_detected
        matches!(error.code().as_deref(), Some("40001" | "40P01"))
    }

    async fn inbox_completed<'a>(
        store: &'a SqlStore<Self>,
        query: &'a Query,
        binds: &'a [Bind<'a>],
    ) -> Result<bool, StoreError> {
        let completion = Completion::of(binds);
        let runner = || {
            let statements = statements_for(store.table(), COMPLETE_MANY).into();
            on_kept_connection(store.pool().clone(), statements, complete_many, is_conflict)
        };
        match store
            .inbox_turns()
            .completions
            .call(completion, runner)
            .await
        {
            Ok(completed) => Ok(completed.is_some()),
            // Another transaction held a row of the turn: each completion runs alone, on a
            // connection of its own, and only the held one waits for the row, as it would
            // alone.
            Err(error) if is_held(error.database_error()) => {
                store.inbox_owned(query, binds, None).await
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
            let statements = Arc::from([query.sql.clone()]);
            on_kept_connection(store.pool().clone(), statements, take_many, is_conflict)
        };
        store.inbox_turns().takes.call(take, runner).await
    }

    async fn migrate(store: &SqlStore<Self>) -> Result<(), Error> {
        let table = store.table();
        // Up to date: no lock at all (`ALTER TABLE` and `CREATE INDEX` would take one, even
        // with `IF NOT EXISTS`).
        let present = columns(store.pool(), table).await?;
        refuse_unusable(table, &present)?;
        let (ready, indexed) = table_state(store.pool(), table).await?;
        if !(has_store_columns(&present) && ready) {
            upgrade_table(store).await?;
        }
        if !indexed {
            build_inbox_indexes(store).await?;
        }
        Ok(())
    }

    fn notify_other_processes(store: &SqlStore<Self>) {
        let notifier = store.notifier();
        notifier.pending.store(true, Ordering::Release);
        if !notifier.started.swap(true, Ordering::AcqRel) {
            let sql = statement(NOTIFY).replace("{table}", store.table().as_str());
            tokio::spawn(send_notifications(
                store.pool().clone(),
                sql,
                Arc::downgrade(notifier),
            ));
        }
        notifier.wake.notify_one();
    }

    fn listen(store: &SqlStore<Self>) {
        if store.start_listening() {
            tokio::spawn(listen_for_receipts(
                store.pool().clone(),
                format!("{}_inbox", store.table()),
                Arc::downgrade(store.inbox_wake()),
            ));
        }
    }

    async fn purge_batch(
        store: &SqlStore<Self>,
        retention: Duration,
        batch: u64,
    ) -> Result<u64, Error> {
        let [purge] = &store.queries().purge[..] else {
            unreachable!("one purge file")
        };
        let (select, settings) = purge.split_last().expect("the purge's statements");
        let mut transaction = store.pool().begin().await?;
        transaction
            .execute(sqlx::raw_sql(AssertSqlSafe(settings.join(";\n"))))
            .await?;
        let deleted: i64 = sqlx::query_scalar(AssertSqlSafe(select.clone()))
            .bind(i64::try_from(batch).unwrap_or(i64::MAX))
            .bind(micros(retention))
            .fetch_one(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(u64::try_from(deleted).unwrap_or(0))
    }
}

/// Sends the notifications a store owes other processes, one for every change since the last,
/// until the store is gone. A notification that fails is logged; the workers elsewhere still
/// poll.
async fn send_notifications(pool: PgPool, sql: String, notifier: Weak<Notifier>) {
    loop {
        let Some(owed) = notifier.upgrade() else {
            return;
        };
        if !owed.pending.swap(false, Ordering::AcqRel) {
            // Wakes at least once a minute to notice a store that is gone.
            let _ = tokio::time::timeout(Duration::from_secs(60), owed.wake.notified()).await;
            continue;
        }
        drop(owed);
        if let Err(error) = pool.execute(AssertSqlSafe(sql.clone())).await {
            tracing::warn!(%error, "could not notify the inbox workers of other processes");
        }
    }
}

/// Wakes this process's inbox workers on every notification of `channel` (a receipt, an
/// abandon or a replay in another process), until the store is gone. Where `LISTEN` is
/// unavailable (a pooler in transaction mode), the workers poll: logged once, retried every
/// minute.
async fn listen_for_receipts(pool: PgPool, channel: String, wake: Weak<Notify>) {
    let mut warned = false;
    while wake.strong_count() > 0 {
        let listening = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(&channel).await?;
            loop {
                let _ = listener.recv().await?;
                match wake.upgrade() {
                    Some(wake) => wake.notify_waiters(),
                    None => return Ok::<_, sqlx::Error>(()),
                }
            }
        };
        if let Err(error) = listening.await {
            if !warned {
                tracing::warn!(
                    %error,
                    channel,
                    "cannot LISTEN for inbox receipts; the workers poll instead"
                );
                warned = true;
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    }
}

/// Whether the table is up to date besides its columns, and whether its unfinished events'
/// index is built (see `table_state.sql`).
async fn table_state<'c, E>(executor: E, table: &TableName) -> Result<(bool, bool), sqlx::Error>
where
    E: Executor<'c, Database = sqlx::Postgres>,
{
    sqlx::query_as(AssertSqlSafe(statement(TABLE_STATE)))
        .bind(table.index_name())
        .bind(table.expiry_index_name())
        .bind(table.sequence_name())
        .bind(table.as_str())
        .bind(table.unfinished_index_name())
        .bind(table.fresh_index_name())
        .bind(table.ordering_index_name())
        .bind(table.dead_index_name())
        .fetch_one(executor)
        .await
}

/// The part of the migration script that runs in a transaction, tried again after
/// [`BUSY_TABLE_PAUSE`] each time its `ALTER TABLE` gave up waiting for the table's lock (a
/// transaction held the table), for [`MIGRATION_LOCK_TIMEOUT`] at most.
async fn upgrade_table(store: &SqlStore<Postgres>) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + MIGRATION_LOCK_TIMEOUT;
    loop {
        match try_upgrade_table(store).await {
            Err(Error::Database(sqlx::Error::Database(error)))
                if error.code().as_deref() == Some("55P03") =>
            {
                if tokio::time::Instant::now() + BUSY_TABLE_PAUSE > deadline {
                    return Err(Error::TableBusy {
                        table: store.table().as_str().to_owned(),
                        waited: MIGRATION_LOCK_TIMEOUT,
                    });
                }
                tokio::time::sleep(BUSY_TABLE_PAUSE).await;
            }
            other => return other,
        }
    }
}

/// One try of [`upgrade_table`], under the migration lock, unless another replica ran it
/// meanwhile.
async fn try_upgrade_table(store: &SqlStore<Postgres>) -> Result<(), Error> {
    let table = store.table();
    let mut transaction = store.pool().begin().await?;
    match transaction.execute(sqlx::raw_sql(MIGRATION_LOCK)).await {
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("55P03") => {
            return Err(Error::MigrationLocked {
                table: table.as_str().to_owned(),
                waited: MIGRATION_LOCK_TIMEOUT,
            });
        }
        other => other?,
    };
    // Another replica may have migrated meanwhile: look again, under the lock.
    let present = columns(&mut *transaction, table).await?;
    refuse_unusable(table, &present)?;
    let (ready, _) = table_state(&mut *transaction, table).await?;
    if has_store_columns(&present) && ready {
        transaction.commit().await?;
        return Ok(());
    }
    transaction.execute(sqlx::raw_sql(UPGRADE_SETTINGS)).await?;
    let script = store.schema().replace(
        "INTERVAL '72 hours'",
        &format!(
            "INTERVAL '{} microseconds'",
            micros(store.adopted_retention())
        ),
    );
    let (in_transaction, _) = script
        .split_once(OUTSIDE_A_TRANSACTION)
        .expect("the script's part outside a transaction");
    transaction
        .execute(sqlx::raw_sql(AssertSqlSafe(in_transaction.to_owned())))
        .await?;
    transaction.commit().await?;
    Ok(())
}

/// The part of the migration script that runs outside a transaction: inbox mode's indexes,
/// each built concurrently (receipts and claims go on meanwhile) in a statement of its own, by
/// one replica at a time.
async fn build_inbox_indexes(store: &SqlStore<Postgres>) -> Result<(), Error> {
    let table = store.table();
    let mut connection = store.pool().acquire().await?;
    let deadline = tokio::time::Instant::now() + MIGRATION_LOCK_TIMEOUT;
    loop {
        let locked: bool = sqlx::query_scalar(AssertSqlSafe(statement(INDEX_LOCK)))
            .fetch_one(&mut *connection)
            .await?;
        if locked {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::MigrationLocked {
                table: table.as_str().to_owned(),
                waited: MIGRATION_LOCK_TIMEOUT,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let script = store.schema();
    let (_, concurrently) = script
        .split_once(OUTSIDE_A_TRANSACTION)
        .expect("the script's part outside a transaction");
    // The part's first line ends the marker's comment; then one statement per index, in the
    // order of `indexes`.
    let concurrently = concurrently.split_once('\n').map_or("", |(_, rest)| rest);
    let creates = statements(concurrently);
    let indexes = [
        table.unfinished_index_name(),
        table.fresh_index_name(),
        table.ordering_index_name(),
        table.dead_index_name(),
    ];
    let built = async {
        for (index, create) in indexes.iter().zip(&creates) {
            let state: String = sqlx::query_scalar(AssertSqlSafe(statement(INDEX_STATE)))
                .bind(index)
                .fetch_one(&mut *connection)
                .await?;
            if state == "invalid" {
                // Under the lock nobody else builds it: an invalid index is a build that
                // failed.
                let drop = statement(DROP_INVALID_INDEX).replace("{index}", index);
                connection.execute(AssertSqlSafe(drop)).await?;
            }
            if state != "valid" {
                connection.execute(AssertSqlSafe(create.clone())).await?;
            }
        }
        Ok::<_, sqlx::Error>(())
    }
    .await;
    let unlocked = connection
        .execute(AssertSqlSafe(statement(INDEX_UNLOCK)))
        .await;
    built?;
    unlocked?;
    Ok(())
}

/// [`PostgresStore`](crate::PostgresStore)'s own constructor and settings.
impl SqlStore<Postgres> {
    /// How long a connection of [`connect`](Self::connect)'s pool must have been idle for the
    /// pool to check it (a ping, one round trip) before handing it out.
    pub const IDLE_BEFORE_PING: Duration = Duration::from_secs(1);

    /// Connects to `url` (`postgres://user:password@host:port/database`) with a pool of at most
    /// [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS) connections and an acquire (and connect)
    /// timeout of [`ACQUIRE_TIMEOUT`](Self::ACQUIRE_TIMEOUT), and opens one connection to check
    /// the URL. The pool checks (pings) a connection before handing it out only when it has
    /// been idle for [`IDLE_BEFORE_PING`](Self::IDLE_BEFORE_PING) or longer, not before every
    /// statement as sqlx's default does. Each connection runs at READ COMMITTED, whatever the
    /// database's or the role's `default_transaction_isolation`: the isolation the statements
    /// are written for, under which concurrent claims wait for each other instead of failing.
    ///
    /// On a pool of your own ([`new`](SqlStore::new)) the store leaves the session alone; a
    /// claim that a stricter isolation level aborts (a serialization failure, SQLSTATE 40001,
    /// or a deadlock, 40P01) lost a race for the event and is answered as in flight (409), never
    /// as a store failure.
    ///
    /// TLS: enable one of sqlx's `tls-*` features in your own `sqlx` dependency (at this
    /// crate's version) and add `sslmode=require` to the URL.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the URL is invalid or the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options: PgConnectOptions = url.parse()?;
        let pool: PgPool = PgPoolOptions::new()
            .max_connections(Self::MAX_CONNECTIONS)
            .acquire_timeout(Self::ACQUIRE_TIMEOUT)
            // sqlx's default (`test_before_acquire`) pings every connection it takes from the
            // idle queue: one more round trip before each statement, which under load cost the
            // store 7 % to 24 % of its requests/s over HTTP (BENCHMARKS.md, section 5). A
            // connection in steady use has just answered its previous statement; one that sat
            // idle may have been dropped by the server or a proxy meanwhile, so it is still
            // checked (and replaced when dead), as before.
            .test_before_acquire(false)
            .before_acquire(|connection, metadata| {
                Box::pin(async move {
                    if metadata.idle_for >= Self::IDLE_BEFORE_PING {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(|connection, _| {
                Box::pin(async move {
                    connection
                        .execute(AssertSqlSafe(statement(SESSION)))
                        .await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        Ok(Self::new(pool))
    }

    /// Whether claims and renewals are committed asynchronously (`true`) instead of durably
    /// (`false`, the default).
    ///
    /// By default claims, renewals and completions are committed with the session's
    /// `synchronous_commit` (`on` unless you changed it): each waits until the database has
    /// flushed it to disk. Releases are always committed asynchronously: losing one only makes
    /// the next delivery wait for the lease.
    ///
    /// With asynchronous claims, the claim and renew statements set `synchronous_commit = off`
    /// for their own transaction only (`set_config(…, true)` in the statement: still one round
    /// trip), which saves one disk flush per event. They are visible to every other session at
    /// once, so concurrent deliveries are deduplicated as usual; but a crash *of the database
    /// server* (power loss, kill -9 or an out-of-memory kill of any backend, which restarts
    /// them all) loses the claims and renewals of the last moments before it: up to three
    /// times `wal_writer_delay` (200 ms by default). A handler running under a lost claim
    /// keeps running while the next delivery of the event can acquire it again, so **the event
    /// can be processed twice**. Opt in only where a rare double after a database crash is
    /// acceptable.
    #[must_use]
    pub fn with_asynchronous_claims(self, asynchronous: bool) -> Self {
        self.set_synchronous_claims(!asynchronous)
    }

    /// How long a claim or a renewal waits for a lock held by another transaction (the event's
    /// row, the table) before it fails; the default is
    /// [`LOCK_TIMEOUT`](SqlStore::LOCK_TIMEOUT), 2 s. Whole milliseconds, rounded up.
    ///
    /// The claim and renew statements set `lock_timeout` for their own transaction, inside the
    /// statement (`set_config('lock_timeout', …, true)`): still one round trip, on a pool of
    /// your own as on [`connect`](Self::connect)'s, and the session's `lock_timeout` is left
    /// as it is for every other statement, your transactions included.
    ///
    /// Keep it below the layer's store timeout minus the pool's acquire timeout (5 s − 3 s
    /// with the defaults): a claim the layer gave up on while it waited for a lock would
    /// otherwise land after the layer released it, and block the event with 409 for a lease
    /// (see [Lock waits](SqlStore#lock-waits)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sangho_webhook_sqlx::{PostgresStore, sqlx::postgres::PgPoolOptions};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let pool = PgPoolOptions::new().connect_lazy("postgres://localhost/app").unwrap();
    /// // With a layer built `.with_store_timeout(Duration::from_secs(2))` and a pool whose
    /// // acquire timeout is 1 s:
    /// let store = PostgresStore::new(pool).with_lock_timeout(Duration::from_millis(800));
    /// # drop(store);
    /// # });
    /// ```
    #[must_use]
    pub fn with_lock_timeout(self, timeout: Duration) -> Self {
        self.set_lock_timeout(timeout)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_upgrade_waits_half_a_second_for_the_table_in_its_transaction() {
        let script = <super::Postgres as crate::dialect::Sealed>::SQL.schema;
        let (in_transaction, _) = script.split_once(super::OUTSIDE_A_TRANSACTION).unwrap();
        let wait = in_transaction
            .find("SET LOCAL lock_timeout = '500ms';")
            .unwrap();
        assert!(wait < in_transaction.find("\nALTER TABLE").unwrap());
    }

    #[test]
    fn the_migration_lock_waits_for_its_timeout() {
        let wait = format!(
            "SET LOCAL lock_timeout = '{}ms'",
            super::MIGRATION_LOCK_TIMEOUT.as_millis()
        );
        assert!(super::MIGRATION_LOCK.contains(&wait));
    }
}
