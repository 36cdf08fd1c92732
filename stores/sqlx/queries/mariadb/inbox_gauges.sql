-- Inbox mode: the numbers an operator alerts on, from the unfinished and dead events only, by
-- the (state, due_at) index (never the completed events, which a busy inbox holds by the
-- million): the waiting, in-flight and dead events, and how long ago the oldest due waiting
-- event was received (milliseconds; NULL when none is due).
-- Answers one row: received, in_flight, dead, oldest_waiting_ms.
SELECT CAST(COALESCE(SUM(state = 'received'), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'in_flight'), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'dead'), 0) AS SIGNED),
       CAST(TIMESTAMPDIFF(MICROSECOND,
                          MIN(IF(state = 'received' AND due_at <= UTC_TIMESTAMP(6),
                                 received_at, NULL)),
                          UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)
FROM {table}
WHERE state IN ('received', 'in_flight', 'dead');
