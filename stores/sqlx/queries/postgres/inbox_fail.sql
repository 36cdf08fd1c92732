-- Inbox mode: record a failed attempt (owner-checked): its time and error in the history
-- (the last 8 KiB kept), and the event due again after the delay, or dead.
-- Binds: $1 event id, $2 the worker's claim token, $3 the error excerpt, $4 1 for dead (0
-- otherwise), $5 the delay in µs.
-- Answers 'recorded' when the attempt is recorded; no row when the token does not hold the
-- event.
UPDATE {table}
SET state = CASE WHEN $4 = 1 THEN 'dead' ELSE 'received' END,
    claim_token = NULL,
    due_at = CASE WHEN $4 = 1 THEN NULL
                  ELSE statement_timestamp() + $5 * INTERVAL '1 microsecond' END,
    last_error = $3,
    history = right(
        COALESCE(history, '')
        || to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        || ' attempt ' || attempts || ': ' || $3 || E'\n'
        || CASE WHEN $4 = 1 THEN
               to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
               || ' dead' || E'\n'
           ELSE '' END, 8192)
WHERE event_id = $1 AND claim_token = $2 AND state = 'in_flight'
  AND received_at IS NOT NULL
RETURNING 'recorded';
