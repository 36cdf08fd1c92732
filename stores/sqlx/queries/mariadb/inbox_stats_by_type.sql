-- Inbox mode: `inbox_stats.sql` for each event type, types in name order.
-- Answers one row per type: event_type, received, in_flight, completed, dead,
-- oldest_waiting_ms.
SELECT event_type,
       CAST(COALESCE(SUM(state = 'received'), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'in_flight'), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'completed'), 0) AS SIGNED),
       CAST(COALESCE(SUM(state = 'dead'), 0) AS SIGNED),
       CAST(TIMESTAMPDIFF(MICROSECOND,
                          MIN(IF(state = 'received' AND due_at <= UTC_TIMESTAMP(6),
                                 received_at, NULL)),
                          UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)
FROM {table}
WHERE received_at IS NOT NULL AND (state <> 'completed' OR expires_at > UTC_TIMESTAMP(6))
GROUP BY event_type
ORDER BY event_type;
