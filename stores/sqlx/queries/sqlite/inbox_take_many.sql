-- Inbox mode: many takes at once (a group commit's takes), in one statement: the next due
-- events, one for each waiting worker, each under its worker's claim token (as many as are
-- due, up to the number of workers), each taken as `inbox_take.sql` takes its one event.
-- Due: waiting with its time come, or in flight with its lease run out (the lost attempt goes
-- into the history); and, for an event with an ordering key, no other event of its key in
-- flight under a live lease, and no unfinished event of its key received before it: of one
-- key, only its first unfinished event can be due, so that one statement never takes two
-- events of one key. New events first (a row's third value 1): events on their first attempt
-- since their receipt or replay (`fresh`, by the index of fresh events) before any other due
-- event (`due`, for the workers `fresh` left), each in the order of receipt. The searches are
-- made once, on the table as it was before the statement (`MATERIALIZED`), and the key's
-- check reads at most one row, as in `inbox_take.sql`.
--
-- SQLite runs one writer at a time: no two takes take one event.
-- Binds: `{rows}` stands for the rows' values, `(?, ?, ?)` each: the worker's claim token, the
-- lease in µs, 1 to take new events first (0: every due event in the order of receipt). A row
-- of NULLs takes nothing.
-- Answers a row for each taken event (id, type, body, headers, path, received and budget
-- start in Unix milliseconds, this attempt's number, ordering key, and the token it was taken
-- under); no row when nothing is due.
WITH takes (claim_token, lease, fresh_first) AS (VALUES {rows}),
clock (now) AS MATERIALIZED (
    SELECT CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
),
waiting AS MATERIALIZED (
    SELECT claim_token, lease, row_number() OVER (ORDER BY claim_token) AS place
    FROM takes WHERE claim_token IS NOT NULL
),
fresh AS MATERIALIZED (
    SELECT c.event_id, c.sequence FROM {table} AS c
    WHERE (SELECT max(fresh_first) FROM takes) = 1 AND c.state = 'received' AND c.attempts = 0
      AND c.due_at <= (SELECT now FROM clock)
      AND (c.ordering_key IS NULL
           OR (NOT EXISTS (SELECT 1 FROM {table} AS k
                           WHERE k.ordering_key = c.ordering_key
                             AND k.state IN ('received', 'in_flight')
                             AND k.sequence < c.sequence)
               AND NOT EXISTS (SELECT 1 FROM {table} AS k
                               WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                                 AND k.due_at > (SELECT now FROM clock))))
    ORDER BY c.sequence
    LIMIT (SELECT count(*) FROM waiting)
),
due AS MATERIALIZED (
    SELECT c.event_id, c.sequence FROM {table} AS c
    WHERE c.state IN ('received', 'in_flight') AND c.received_at IS NOT NULL
      AND c.due_at <= (SELECT now FROM clock)
      AND c.event_id NOT IN (SELECT event_id FROM fresh)
      AND (c.ordering_key IS NULL
           OR (NOT EXISTS (SELECT 1 FROM {table} AS k
                           WHERE k.ordering_key = c.ordering_key
                             AND k.state IN ('received', 'in_flight')
                             AND k.sequence < c.sequence)
               AND NOT EXISTS (SELECT 1 FROM {table} AS k
                               WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                                 AND k.due_at > (SELECT now FROM clock))))
    ORDER BY c.sequence
    LIMIT (SELECT count(*) FROM waiting) - (SELECT count(*) FROM fresh)
),
next AS MATERIALIZED (
    SELECT event_id, row_number() OVER (ORDER BY sequence) AS place
    FROM (SELECT event_id, sequence FROM fresh UNION ALL SELECT event_id, sequence FROM due)
)
UPDATE {table} AS e
SET state = 'in_flight',
    claim_token = waiting.claim_token,
    due_at = clock.now + waiting.lease / 1000,
    attempts = e.attempts + 1,
    last_error = CASE WHEN e.state = 'in_flight' THEN 'the lease ran out' ELSE e.last_error END,
    history = CASE
        WHEN e.state = 'in_flight' THEN substr(
            COALESCE(e.history, '') || strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            || ' attempt ' || e.attempts || ': the lease ran out' || char(10), -8192)
        ELSE e.history
    END
FROM next JOIN waiting USING (place), clock
WHERE e.event_id = next.event_id
RETURNING event_id, event_type, body, headers, request_path, received_at,
          COALESCE(replayed_at, received_at), attempts, ordering_key, claim_token;
