-- Inbox mode: how many events a filter selects.
-- Binds: state or NULL (twice), event type or NULL (twice), received at or after (Unix ms) or
-- NULL (twice), received before (Unix ms) or NULL (twice), the ordering key or NULL (twice).
-- Answers one count.
SELECT CAST(COUNT(*) AS SIGNED)
FROM {table}
WHERE received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > UTC_TIMESTAMP(6))
  AND (? IS NULL OR state = ?)
  AND (? IS NULL OR event_type = ?)
  AND (? IS NULL OR received_at >= TIMESTAMP '1970-01-01 00:00:00' + INTERVAL (? * 1000) MICROSECOND)
  AND (? IS NULL OR received_at < TIMESTAMP '1970-01-01 00:00:00' + INTERVAL (? * 1000) MICROSECOND)
  AND (? IS NULL OR ordering_key = ?);
