-- Inbox mode: the events a filter selects in the order of receipt (a replayed event in the
-- place of its replay), at most a limit. Every inbox event has a sequence number: saying so
-- lets the list read them in order from `idx_webhook_inbox_sequence`, which holds no other row.
-- Binds: ?1 state or NULL, ?2 event type or NULL, ?3 received at or after (Unix ms) or NULL,
-- ?4 received before (Unix ms) or NULL, ?5 the limit, ?6 the ordering key or NULL.
-- Answers one row per event: id, type, state, received (Unix ms), attempts, last error,
-- ordering key.
SELECT event_id, event_type, state, received_at, attempts, last_error, ordering_key
FROM {table}
WHERE received_at IS NOT NULL AND sequence IS NOT NULL
  AND (state <> 'completed' OR expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
  AND (?1 IS NULL OR state = ?1)
  AND (?2 IS NULL OR event_type = ?2)
  AND (?3 IS NULL OR received_at >= ?3)
  AND (?4 IS NULL OR received_at < ?4)
  AND (?6 IS NULL OR ordering_key = ?6)
ORDER BY sequence
LIMIT ?5;
