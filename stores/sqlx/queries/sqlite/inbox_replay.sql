-- Inbox mode: make an event due now with a fresh attempt budget, its history kept: a waiting
-- or dead event, one in flight whose lease ran out, and a completed one (still within its
-- retention) only when forced. The event takes a new sequence number, one above the highest:
-- the last place in the order of receipt (behind the events of its ordering key still
-- unfinished). SQLite evaluates every SET expression on the row as it was.
-- Binds: ?1 event id, ?2 1 to force (0 otherwise), ?3 the reason.
-- Answers 'replayed'; no row when it changed nothing (then `inbox_state.sql` says why).
UPDATE {table}
SET history = substr(
        COALESCE(history, '') || strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
        || CASE WHEN state = 'completed' THEN ' replayed (forced): ' ELSE ' replayed: ' END
        || ?3 || char(10), -8192),
    state = 'received',
    claim_token = NULL,
    processed_at = NULL,
    expires_at = NULL,
    due_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER),
    attempts = 0,
    replays = replays + 1,
    replayed_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER),
    sequence = (SELECT COALESCE(MAX(sequence), 0) + 1 FROM {table} WHERE sequence IS NOT NULL)
WHERE event_id = ?1 AND received_at IS NOT NULL
  AND (state IN ('received', 'dead')
       OR (state = 'in_flight' AND due_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
       OR (state = 'completed' AND ?2 = 1 AND expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)))
RETURNING 'replayed';
