-- Inbox mode: events per state, and how long ago the oldest due waiting event was received
-- (milliseconds; NULL when none is due). Completed events past their retention are gone
-- already for every other operation, and are not counted.
-- Answers one row: received, in_flight, completed, dead, oldest_waiting_ms.
SELECT count(*) FILTER (WHERE state = 'received'),
       count(*) FILTER (WHERE state = 'in_flight'),
       count(*) FILTER (WHERE state = 'completed' AND expires_at > statement_timestamp()),
       count(*) FILTER (WHERE state = 'dead'),
       CAST(extract(epoch FROM statement_timestamp()
                              - min(received_at) FILTER (WHERE state = 'received'
                                                         AND due_at <= statement_timestamp()))
            * 1000 AS BIGINT)
FROM {table}
WHERE received_at IS NOT NULL;
