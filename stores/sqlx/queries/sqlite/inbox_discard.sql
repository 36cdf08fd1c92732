-- Inbox mode: delete an event by hand (personal data), unless a worker's lease on it runs.
-- Binds: ?1 event id.
-- Answers 'discarded'; no row when it deleted nothing (then `inbox_state.sql` says why).
DELETE FROM {table}
WHERE event_id = ?1 AND received_at IS NOT NULL
  AND NOT (state = 'in_flight' AND due_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
  AND (state <> 'completed' OR expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
RETURNING 'discarded';
