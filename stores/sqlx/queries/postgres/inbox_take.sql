-- Inbox mode: take the due event received first under a worker's lease, in one statement.
-- Due: waiting with its time come, or in flight with its lease run out (its worker crashed or
-- stalled; the lost attempt goes into the history). `SKIP LOCKED`: concurrent takes pass over
-- the row another take is locking, so that no two take one event.
--
-- Committed asynchronously (`commit_mode`): the worker's answer, its completion, is a
-- synchronous commit, and PostgreSQL flushes its write-ahead log in order, so the completion's
-- flush makes the take durable too. A take lost in a crash of the database before that flush
-- only leaves the event as it was before the take: due, taken again after the restart, the
-- lost attempt not counted.
-- Binds: $1 the worker's claim token, $2 the lease in µs.
-- Answers the taken event (id, type, body, headers, path, received and budget start in Unix
-- milliseconds, this attempt's number), or no row when nothing is due.
WITH commit_mode AS (SELECT set_config('synchronous_commit', 'off', true)),
next AS (
    SELECT event_id FROM {table}
    WHERE state IN ('received', 'in_flight') AND due_at <= statement_timestamp()
    ORDER BY sequence
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS e
SET state = 'in_flight',
    claim_token = $1,
    due_at = statement_timestamp() + $2 * INTERVAL '1 microsecond',
    attempts = e.attempts + 1,
    last_error = CASE WHEN e.state = 'in_flight' THEN 'the lease ran out' ELSE e.last_error END,
    history = CASE
        WHEN e.state = 'in_flight' THEN right(
            COALESCE(e.history, '')
            || to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
            || ' attempt ' || e.attempts || ': the lease ran out' || E'\n', 8192)
        ELSE e.history
    END
FROM next, commit_mode
WHERE e.event_id = next.event_id
RETURNING e.event_id, e.event_type, e.body, e.headers, e.request_path,
          CAST(extract(epoch FROM e.received_at) * 1000 AS BIGINT),
          CAST(extract(epoch FROM COALESCE(e.replayed_at, e.received_at)) * 1000 AS BIGINT),
          CAST(e.attempts AS BIGINT);
