-- Inbox mode: one event in full.
-- Binds: event id.
-- Answers one row: id, type, state, received (Unix ms), attempts, last error, ordering key,
-- due (Unix ms, NULL unless waiting or in flight), replays, headers, path, body, history; no
-- row when the inbox does not hold the event.
SELECT event_id, event_type, state, CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', received_at) DIV 1000 AS SIGNED), CAST(attempts AS SIGNED), last_error,
       ordering_key,
       CASE WHEN state IN ('received', 'in_flight') THEN CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', due_at) DIV 1000 AS SIGNED) END,
       CAST(replays AS SIGNED), headers, request_path, body, history
FROM {table}
WHERE event_id = ? AND received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > UTC_TIMESTAMP(6));
