-- Complete many events at once (a group commit's completions of distinct ids), in one
-- statement: each row as `complete.sql` completes its one event.
-- Binds: `{rows}` stands for the rows' values, `(?, ?, ?, ?)` each: event id, event type,
-- the delivery's claim token, the retention in µs. A row of NULLs completes nothing.
-- Answers one row (`event_id`, `claim_token`) for each event now completed by its token; no
-- row for an event another owner's live record was left alone.
WITH completions (event_id, event_type, claim_token, retention) AS (VALUES {rows})
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
SELECT event_id, event_type, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'completed', claim_token,
       CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + retention / 1000
FROM completions
WHERE event_id IS NOT NULL
ON CONFLICT (event_id) DO UPDATE SET
    event_type = CASE WHEN e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                      THEN excluded.event_type ELSE e.event_type END,
    processed_at = CASE WHEN e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                        THEN excluded.processed_at
                        ELSE COALESCE(e.processed_at, excluded.processed_at) END,
    state = 'completed',
    claim_token = excluded.claim_token,
    expires_at = excluded.expires_at,
    due_at = NULL
WHERE e.claim_token = excluded.claim_token
   OR e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
RETURNING event_id, claim_token;
