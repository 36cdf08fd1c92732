-- Inbox mode: delete an event by hand (personal data), unless a worker's lease on it runs.
-- Binds: event id.
-- Answers 'discarded'; no row when it deleted nothing (then inbox_state.sql says why).
DELETE FROM {table}
WHERE event_id = ? AND received_at IS NOT NULL
  AND NOT (state = 'in_flight' AND due_at > UTC_TIMESTAMP(6))
  AND (state <> 'completed' OR expires_at > UTC_TIMESTAMP(6))
RETURNING 'discarded';
