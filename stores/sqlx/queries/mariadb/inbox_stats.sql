-- Inbox mode: events per state, and how long ago the oldest due waiting event was received
-- (milliseconds; NULL when none is due). Completed events past their retention are gone
-- already for every other operation, and are not counted.
-- Answers one row: received, in_flight, completed, dead, oldest_waiting_ms.
SELECT CAST(COALESCE(SUM(state = 'received'), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'in_flight'), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'completed' AND expires_at > UTC_TIMESTAMP(6)), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'dead'), 0) AS SIGNED),
       CAST(TIMESTAMPDIFF(MICROSECOND,
                          MIN(IF(state = 'received' AND due_at <= UTC_TIMESTAMP(6),
                                 received_at, NULL)),
                          UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)
FROM {table}
WHERE received_at IS NOT NULL;
