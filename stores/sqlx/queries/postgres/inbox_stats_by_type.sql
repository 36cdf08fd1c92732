-- Inbox mode: `inbox_stats.sql` for each event type, types in name order.
-- Answers one row per type: event_type, received, in_flight, completed, dead,
-- oldest_waiting_ms.
SELECT event_type,
       count(*) FILTER (WHERE state = 'received'),
       count(*) FILTER (WHERE state = 'in_flight'),
       count(*) FILTER (WHERE state = 'completed' AND expires_at > statement_timestamp()),
       count(*) FILTER (WHERE state = 'dead'),
       CAST(extract(epoch FROM statement_timestamp()
                              - min(received_at) FILTER (WHERE state = 'received'
                                                         AND due_at <= statement_timestamp()))
            * 1000 AS BIGINT)
FROM {table}
WHERE received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > statement_timestamp())
GROUP BY event_type
ORDER BY event_type;
