-- Inbox mode: record many events as completed by their workers' tokens at once (a group
-- commit's completions of distinct events), in one statement: each row as
-- `inbox_complete.sql` completes its one event.
-- Binds: `{rows}` stands for the rows' values, `($1::text, $2::text, $3::bigint)` each: event
-- id, the worker's claim token, the retention in µs. A row of NULLs completes nothing.
-- Answers one row (`event_id`, `claim_token`) for each event completed by its token; no row
-- for the others.
WITH completions (event_id, claim_token, retention) AS (VALUES {rows})
UPDATE {table} AS e
SET state = 'completed',
    processed_at = CASE WHEN e.state = 'completed' THEN e.processed_at
                        ELSE CAST(statement_timestamp() AT TIME ZONE 'UTC' AS TIMESTAMP) END,
    expires_at = CASE WHEN e.state = 'completed' THEN e.expires_at
                      ELSE statement_timestamp() + c.retention * INTERVAL '1 microsecond' END,
    due_at = NULL
FROM completions AS c
WHERE e.event_id = c.event_id AND e.claim_token = c.claim_token
  AND e.state IN ('in_flight', 'completed') AND e.received_at IS NOT NULL
RETURNING e.event_id, e.claim_token;
