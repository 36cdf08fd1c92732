-- Inbox mode: record a failed attempt (owner-checked): its time and error in the history
-- (the last 8 KiB kept), and the event due again after the delay, or dead.
-- Binds: ?1 event id, ?2 the worker's claim token, ?3 the error excerpt, ?4 1 for dead (0
-- otherwise), ?5 the delay in µs.
-- Answers 'recorded' when the attempt is recorded; no row when the token does not hold the
-- event.
UPDATE {table}
SET state = CASE WHEN ?4 = 1 THEN 'dead' ELSE 'received' END,
    claim_token = NULL,
    due_at = CASE WHEN ?4 = 1 THEN NULL ELSE CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + ?5 / 1000 END,
    last_error = ?3,
    history = substr(
        COALESCE(history, '')
        || strftime('%Y-%m-%dT%H:%M:%fZ', 'now') || ' attempt ' || attempts || ': ' || ?3 || char(10)
        || CASE WHEN ?4 = 1 THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') || ' dead' || char(10) ELSE '' END, -8192)
WHERE event_id = ?1 AND claim_token = ?2 AND state = 'in_flight'
  AND received_at IS NOT NULL
RETURNING 'recorded';
