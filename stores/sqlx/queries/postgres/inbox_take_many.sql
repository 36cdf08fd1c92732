-- Inbox mode: a turn of takes, in one statement: the next due events, one for each worker
-- that waits for one, each under its worker's claim token (as many as are due, up to the
-- number of tokens).
-- Due: waiting with its time come, or in flight with its lease run out (its worker crashed or
-- stalled; the lost attempt goes into the history); and, for an event with an ordering key,
-- no other event of its key in flight under a live lease, and no unfinished event of its key
-- received before it: of one key, only its first unfinished event can be due, so that a turn
-- never takes two events of one key. New events first ($3 = 1): events on their first attempt
-- since their receipt or replay (the `fresh` search) before any other due event (the `due`
-- search, for the tokens `fresh` left), each in the order of receipt. `SKIP LOCKED`:
-- concurrent takes (another process's) pass over the row another take is locking, so that no
-- two take one event; a take that passes over the first event of a key finds the key's next
-- one held back by it.
--
-- Committed asynchronously (`commit_mode`): the worker's answer, its completion, is a
-- synchronous commit, and PostgreSQL flushes its write-ahead log in order, so the completion's
-- flush makes the take durable too. A take lost in a crash of the database before that flush
-- only leaves the event as it was before the take: due, taken again after the restart, the
-- lost attempt not counted.
-- Binds: $1 the waiting workers' claim tokens (text[], in the order they waited), $2 the
-- lease in µs, $3 1 to take new events first (0: every due event in the order of receipt).
-- Answers a row for each taken event (id, type, body, headers, path, received and budget
-- start in Unix milliseconds, this attempt's number, ordering key, and the place of its
-- token in $1, from 1): the first tokens take an event each, in the order of receipt; no row
-- when nothing is due.
WITH commit_mode AS (SELECT set_config('synchronous_commit', 'off', true)),
fresh AS (
    SELECT c.event_id, c.sequence FROM {table} AS c
    WHERE $3 = 1 AND c.state = 'received' AND c.attempts = 0
      AND c.due_at <= statement_timestamp()
      AND (c.ordering_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {table} AS k
          WHERE k.ordering_key = c.ordering_key AND k.state IN ('received', 'in_flight')
            AND (k.sequence < c.sequence
                 OR (k.state = 'in_flight' AND k.due_at > statement_timestamp()))))
    ORDER BY c.sequence
    LIMIT cardinality($1::text[])
    FOR UPDATE OF c SKIP LOCKED
),
due AS (
    SELECT c.event_id, c.sequence FROM {table} AS c
    WHERE c.state IN ('received', 'in_flight') AND c.due_at <= statement_timestamp()
      AND c.event_id NOT IN (SELECT event_id FROM fresh)
      AND (c.ordering_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {table} AS k
          WHERE k.ordering_key = c.ordering_key AND k.state IN ('received', 'in_flight')
            AND (k.sequence < c.sequence
                 OR (k.state = 'in_flight' AND k.due_at > statement_timestamp()))))
    ORDER BY c.sequence
    LIMIT cardinality($1::text[]) - (SELECT count(*) FROM fresh)
    FOR UPDATE OF c SKIP LOCKED
),
next AS (
    SELECT found.event_id, row_number() OVER (ORDER BY found.sequence) AS place
    FROM (SELECT event_id, sequence FROM fresh UNION ALL SELECT event_id, sequence FROM due)
        AS found
),
tokens AS (
    SELECT token, place FROM unnest($1::text[]) WITH ORDINALITY AS t (token, place)
)
UPDATE {table} AS e
SET state = 'in_flight',
    claim_token = tokens.token,
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
FROM next JOIN tokens USING (place), commit_mode
WHERE e.event_id = next.event_id
RETURNING e.event_id, e.event_type, e.body, e.headers, e.request_path,
          CAST(extract(epoch FROM e.received_at) * 1000 AS BIGINT),
          CAST(extract(epoch FROM COALESCE(e.replayed_at, e.received_at)) * 1000 AS BIGINT),
          CAST(e.attempts AS BIGINT), e.ordering_key, tokens.place;
