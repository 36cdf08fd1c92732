-- Inbox mode: the events a filter selects, received first first, at most a limit.
-- Binds: $1 state or NULL, $2 event type or NULL, $3 received at or after (Unix ms) or NULL,
-- $4 received before (Unix ms) or NULL, $5 the limit, $6 the ordering key or NULL.
-- Answers one row per event: id, type, state, received (Unix ms), attempts, last error,
-- ordering key.
SELECT event_id, event_type, state,
       CAST(extract(epoch FROM received_at) * 1000 AS BIGINT), CAST(attempts AS BIGINT),
       last_error, ordering_key
FROM {table}
WHERE received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > statement_timestamp())
  AND ($1::text IS NULL OR state = $1)
  AND ($2::text IS NULL OR event_type = $2)
  AND ($3::bigint IS NULL OR received_at >= to_timestamp($3::float8 / 1000))
  AND ($4::bigint IS NULL OR received_at < to_timestamp($4::float8 / 1000))
  AND ($6::text IS NULL OR ordering_key = $6)
ORDER BY sequence
LIMIT $5;
