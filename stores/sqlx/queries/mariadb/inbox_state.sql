-- Inbox mode: the state of an event in the inbox, after a replay or a discard that changed
-- nothing: 'in_flight' while a worker's lease runs, 'completed' while its retention runs, or no
-- row (not in the inbox).
-- Binds: event id.
SELECT CASE WHEN state = 'in_flight' AND due_at > UTC_TIMESTAMP(6) THEN 'in_flight'
            ELSE state END
FROM {table}
WHERE event_id = ? AND received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > UTC_TIMESTAMP(6));
