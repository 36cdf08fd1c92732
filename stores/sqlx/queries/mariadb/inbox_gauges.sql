-- Inbox mode: the numbers an operator alerts on, read from the index on (inbox_state, due_at)
-- only (never the completed events, which a busy inbox holds by the million, nor the rows of
-- the direct mode, whose `inbox_state` is NULL): the waiting, in-flight and dead events, each
-- counted from the index alone (an event in flight has the end of its lease as `due_at`), and
-- how long ago the oldest due waiting event was received (milliseconds; NULL when none is due),
-- read from the rows of the due waiting events only.
-- Answers one row: received, in_flight, dead, oldest_waiting_ms.
SELECT (SELECT COUNT(*) FROM {table} FORCE INDEX (idx_webhook_lease_ends)
        WHERE inbox_state = 'received'),
       (SELECT COUNT(*) FROM {table} FORCE INDEX (idx_webhook_lease_ends)
        WHERE inbox_state = 'in_flight' AND due_at IS NOT NULL),
       (SELECT COUNT(*) FROM {table} FORCE INDEX (idx_webhook_lease_ends)
        WHERE inbox_state = 'dead'),
       CAST(TIMESTAMPDIFF(MICROSECOND,
                          (SELECT MIN(received_at) FROM {table} FORCE INDEX (idx_webhook_lease_ends)
                           WHERE inbox_state = 'received' AND due_at <= UTC_TIMESTAMP(6)),
                          UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED);
