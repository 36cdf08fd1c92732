-- Inbox mode: the state of an event, after a receipt, a replay or a discard that changed
-- nothing: 'in_flight' while a worker's lease runs, 'completed' while its retention runs,
-- 'claimed' for a live claim of a direct-mode delivery (not in the inbox: the receipt answers
-- it with 409, replay and discard as unknown), or no row (not in the inbox).
-- Binds: ?1 event id.
SELECT CASE WHEN received_at IS NULL THEN 'claimed'
            WHEN state = 'in_flight' AND due_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) THEN 'in_flight'
            ELSE state END
FROM {table}
WHERE event_id = ?1
  AND (received_at IS NOT NULL
       OR (state = 'in_flight' AND expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)))
  AND (state <> 'completed' OR expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER));
