-- Inbox mode: the numbers an operator alerts on, read from the partial indexes of unfinished
-- and of dead events only (never the completed events, which a busy inbox holds by the
-- million): the waiting, in-flight and dead events, and how long ago the oldest due waiting
-- event was received (milliseconds; NULL when none is due). A direct-mode claim (no
-- `received_at`) is no inbox event.
-- Answers one row: received, in_flight, dead, oldest_waiting_ms.
WITH unfinished AS (
    SELECT state, received_at, due_at FROM {table}
    WHERE state IN ('received', 'in_flight') AND received_at IS NOT NULL
)
SELECT (SELECT count(*) FROM unfinished WHERE state = 'received'),
       (SELECT count(*) FROM unfinished WHERE state = 'in_flight'),
       (SELECT count(*) FROM {table} WHERE state = 'dead'),
       CAST(extract(epoch FROM statement_timestamp()
                              - (SELECT min(received_at) FROM unfinished
                                 WHERE state = 'received' AND due_at <= statement_timestamp()))
            * 1000 AS BIGINT);
