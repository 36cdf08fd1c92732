-- Inbox mode: events per state, and how long ago the oldest due waiting event was received
-- (milliseconds; NULL when none is due). Completed events past their retention are gone
-- already for every other operation, and are not counted.
-- Answers one row: received, in_flight, completed, dead, oldest_waiting_ms.
SELECT count(*) FILTER (WHERE state = 'received'),
       count(*) FILTER (WHERE state = 'in_flight'),
       count(*) FILTER (WHERE state = 'completed' AND expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)),
       count(*) FILTER (WHERE state = 'dead'),
       CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) - min(received_at) FILTER (WHERE state = 'received' AND due_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
FROM {table}
WHERE received_at IS NOT NULL;
