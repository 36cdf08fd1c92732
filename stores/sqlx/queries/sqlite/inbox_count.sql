-- Inbox mode: how many events a filter selects.
-- Binds: ?1 state or NULL, ?2 event type or NULL, ?3 received at or after (Unix ms) or NULL,
-- ?4 received before (Unix ms) or NULL, ?5 the ordering key or NULL.
-- Answers one count.
SELECT count(*)
FROM {table}
WHERE received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
  AND (?1 IS NULL OR state = ?1)
  AND (?2 IS NULL OR event_type = ?2)
  AND (?3 IS NULL OR received_at >= ?3)
  AND (?4 IS NULL OR received_at < ?4)
  AND (?5 IS NULL OR ordering_key = ?5);
