-- Inbox mode: how many events a filter selects.
-- Binds: $1 state or NULL, $2 event type or NULL, $3 received at or after (Unix ms) or NULL,
-- $4 received before (Unix ms) or NULL, $5 the ordering key or NULL.
-- Answers one count.
SELECT count(*)
FROM {table}
WHERE received_at IS NOT NULL
  AND (state <> 'completed' OR expires_at > statement_timestamp())
  AND ($1::text IS NULL OR state = $1)
  AND ($2::text IS NULL OR event_type = $2)
  AND ($3::bigint IS NULL OR received_at >= to_timestamp($3::float8 / 1000))
  AND ($4::bigint IS NULL OR received_at < to_timestamp($4::float8 / 1000))
  AND ($5::text IS NULL OR ordering_key = $5);
