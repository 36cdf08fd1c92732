-- Inbox mode: a turn of completions, in one statement: each event completed by its worker's
-- token as `inbox_complete.sql` completes one (a repeated completion succeeds).
-- Never waits for a row lock (`NOWAIT`): when another transaction holds a row of the turn,
-- the statement fails at once (lock_not_available, 55P03) and writes nothing, and each
-- completion of the turn runs again alone, so that only the held one waits.
-- Binds: $1 the events' ids (text[]), $2 the workers' claim tokens (text[], in the same
-- order), $3 the retention in µs.
-- Answers (`event_id`, `claim_token`) for each event completed by its token; no row for the
-- others.
WITH completions AS (
    SELECT event_id, claim_token
    FROM unnest($1::text[], $2::text[]) AS c (event_id, claim_token)
),
held AS (
    SELECT e.event_id FROM {table} AS e
    JOIN completions AS c ON e.event_id = c.event_id AND e.claim_token = c.claim_token
    WHERE e.state IN ('in_flight', 'completed') AND e.received_at IS NOT NULL
    FOR UPDATE OF e NOWAIT
)
UPDATE {table} AS e
SET state = 'completed',
    processed_at = CASE WHEN e.state = 'completed' THEN e.processed_at
                        ELSE CAST(statement_timestamp() AT TIME ZONE 'UTC' AS TIMESTAMP) END,
    expires_at = CASE WHEN e.state = 'completed' THEN e.expires_at
                      ELSE statement_timestamp() + $3 * INTERVAL '1 microsecond' END,
    due_at = NULL
FROM held
WHERE e.event_id = held.event_id
RETURNING e.event_id, e.claim_token;
