-- Complete many events at once (a group commit's completions of distinct ids), in one
-- statement: each row as `complete.sql` completes its one event.
-- Binds: `{rows}` stands for the rows' values, `($1::text, $2::text, $3::text, $4::bigint)`
-- each: event id, event type, the delivery's claim token, the retention in µs. A row of NULLs
-- completes nothing.
-- Answers one row (`event_id`, `claim_token`) for each event now completed by its token; no
-- row for an event another owner's live record was left alone.
WITH completions (event_id, event_type, claim_token, retention) AS (VALUES {rows})
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
SELECT event_id, event_type, statement_timestamp(), 'completed', claim_token,
       statement_timestamp() + retention * INTERVAL '1 microsecond'
FROM completions
WHERE event_id IS NOT NULL
ON CONFLICT (event_id) DO UPDATE
    SET event_type = CASE WHEN e.expires_at <= statement_timestamp()
                          THEN EXCLUDED.event_type ELSE e.event_type END,
        processed_at = CASE WHEN e.expires_at <= statement_timestamp()
                            THEN EXCLUDED.processed_at
                            ELSE COALESCE(e.processed_at, EXCLUDED.processed_at) END,
        state = 'completed',
        claim_token = EXCLUDED.claim_token,
        expires_at = EXCLUDED.expires_at,
        due_at = NULL
    WHERE e.claim_token = EXCLUDED.claim_token OR e.expires_at <= statement_timestamp()
RETURNING e.event_id, e.claim_token;
