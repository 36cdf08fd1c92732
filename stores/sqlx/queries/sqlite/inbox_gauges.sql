-- Inbox mode: the numbers an operator alerts on, read from the index of waiting, in-flight and
-- dead events alone (`idx_webhook_gauges`, which holds every column the statement reads),
-- never from the completed events, which a busy inbox holds by the million: the waiting,
-- in-flight and dead events, and how long ago the oldest due waiting event was received
-- (milliseconds; NULL when none is due).
-- Answers one row: received, in_flight, dead, oldest_waiting_ms.
SELECT count(*) FILTER (WHERE state = 'received'),
       count(*) FILTER (WHERE state = 'in_flight'),
       count(*) FILTER (WHERE state = 'dead'),
       CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
       - min(received_at) FILTER (
           WHERE state = 'received'
             AND due_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
FROM {table}
WHERE state IN ('received', 'in_flight', 'dead') AND received_at IS NOT NULL;
