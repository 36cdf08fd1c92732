-- Inbox mode: one event in full.
-- Binds: ?1 event id.
-- Answers one row: id, type, state, received (Unix ms), attempts, last error, ordering key,
-- due (Unix ms, NULL unless waiting or in flight), replays, headers, path, body, history; no
-- row when the inbox does not hold the event.
SELECT event_id, event_type, state, received_at, attempts, last_error, ordering_key,
       CASE WHEN state IN ('received', 'in_flight') THEN due_at END,
       replays, headers, request_path, body, history
FROM {table}
WHERE event_id = ?1 AND received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER));
