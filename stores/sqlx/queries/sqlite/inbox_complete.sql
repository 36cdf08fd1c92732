-- Inbox mode: record the event as completed by a worker's token (owner-checked; a repeated
-- completion succeeds). From now on it is a completed record like the direct mode's: a
-- duplicate until `expires_at`, then the purge deletes it; `processed_at` says when.
-- Binds: ?1 event id, ?2 the worker's claim token, ?3 the retention in µs.
-- Answers the row's `claim_token` when the event is completed by the token; no row otherwise.
UPDATE {table}
SET state = 'completed',
    processed_at = CASE WHEN state = 'completed' THEN processed_at
                        ELSE strftime('%Y-%m-%d %H:%M:%f', 'now') END,
    expires_at = CASE WHEN state = 'completed' THEN expires_at
                      ELSE CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + ?3 / 1000 END,
    due_at = NULL
WHERE event_id = ?1 AND claim_token = ?2 AND state IN ('in_flight', 'completed')
  AND received_at IS NOT NULL
RETURNING claim_token;
