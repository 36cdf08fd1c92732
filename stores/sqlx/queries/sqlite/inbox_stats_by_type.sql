-- Inbox mode: `inbox_stats.sql` for each event type, types in name order (byte order, as
-- SQLite's BINARY collation compares). Like `inbox_stats.sql`, it counts the completed events
-- too, so it reads every inbox row: an operator's read, not a metrics scrape (that is
-- `inbox_gauges.sql`).
-- Answers one row per type: event_type, received, in_flight, completed, dead,
-- oldest_waiting_ms.
SELECT event_type,
       count(*) FILTER (WHERE state = 'received'),
       count(*) FILTER (WHERE state = 'in_flight'),
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'dead'),
       CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
       - min(received_at) FILTER (
           WHERE state = 'received'
             AND due_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
FROM {table}
WHERE received_at IS NOT NULL
  AND (state <> 'completed'
       OR expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
GROUP BY event_type
ORDER BY event_type;
