-- Inbox mode: the events a filter selects in the order of receipt (a replayed event in the place
-- of its replay), at most a limit.
-- Binds: state or NULL (twice), event type or NULL (twice), received at or after (Unix ms) or
-- NULL (twice), received before (Unix ms) or NULL (twice), the ordering key or NULL (twice), the
-- limit.
-- Answers one row per event: id, type, state, received (Unix ms), attempts, last error,
-- ordering key.
SELECT event_id, event_type, state, CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', received_at) DIV 1000 AS SIGNED), CAST(attempts AS SIGNED), last_error,
       ordering_key
FROM {table}
WHERE received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > UTC_TIMESTAMP(6))
  AND (? IS NULL OR state = ?)
  AND (? IS NULL OR event_type = ?)
  AND (? IS NULL OR received_at >= TIMESTAMP '1970-01-01 00:00:00' + INTERVAL (? * 1000) MICROSECOND)
  AND (? IS NULL OR received_at < TIMESTAMP '1970-01-01 00:00:00' + INTERVAL (? * 1000) MICROSECOND)
  AND (? IS NULL OR ordering_key = ?)
ORDER BY sequence
LIMIT ?;
