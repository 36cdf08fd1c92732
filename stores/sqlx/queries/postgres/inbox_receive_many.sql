-- Inbox mode: store many verified events at once (a group commit's receipts of distinct ids
-- and ordering keys), in one statement: each row as `inbox_receive.sql` stores its one event,
-- committed synchronously whatever the session's `synchronous_commit` (for the whole group).
-- The receipts' ordering keys are locked first (each key's transaction lock, in the order of
-- their hashes), then each stored event takes its sequence number.
-- Binds: `{rows}` stands for the rows' values, `($1::text, $2::text, $3::bytea, $4::text,
-- $5::text, $6::text)` each: event id, event type, the raw body, the stored headers, the path
-- it was received on, the ordering key or NULL. A row of NULLs stores nothing.
-- Answers one row (`event_id`, `status`) for each event: 'stored', 'duplicate' or 'claimed'
-- as `inbox_receive.sql` answers; no row for an event whose row a concurrent receipt
-- committed after this statement's snapshot (a duplicate).
WITH receipts (event_id, event_type, body, headers, request_path, ordering_key) AS (VALUES {rows}),
settings AS (
    SELECT set_config('synchronous_commit', 'on', true),
           (SELECT count(pg_advisory_xact_lock(key))
            FROM (SELECT DISTINCT hashtextextended(ordering_key, 0) AS key
                  FROM receipts WHERE ordering_key IS NOT NULL ORDER BY 1) AS keys)
),
stored AS (
    INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token,
                              expires_at, received_at, replayed_at, sequence, body, headers,
                              request_path, due_at, attempts, replays, last_error, history,
                              ordering_key)
    SELECT event_id, event_type, NULL, 'received', NULL, NULL, statement_timestamp(), NULL,
           nextval('{table}_sequence'), body, headers, request_path, statement_timestamp(), 0,
           0, NULL, NULL, ordering_key
    FROM receipts, settings
    WHERE event_id IS NOT NULL
    ON CONFLICT (event_id) DO UPDATE
        SET event_type = EXCLUDED.event_type,
            processed_at = NULL,
            state = 'received',
            claim_token = NULL,
            expires_at = NULL,
            received_at = EXCLUDED.received_at,
            replayed_at = NULL,
            sequence = EXCLUDED.sequence,
            body = EXCLUDED.body,
            headers = EXCLUDED.headers,
            request_path = EXCLUDED.request_path,
            due_at = EXCLUDED.due_at,
            attempts = 0,
            replays = 0,
            last_error = NULL,
            history = NULL,
            ordering_key = EXCLUDED.ordering_key
        WHERE e.expires_at <= statement_timestamp()
    RETURNING e.event_id
)
SELECT event_id, 'stored' AS status FROM stored
UNION ALL
SELECT e.event_id,
       CASE
           WHEN e.received_at IS NULL AND e.state = 'in_flight' THEN 'claimed'
           ELSE 'duplicate'
       END
FROM {table} AS e
WHERE e.event_id IN (SELECT event_id FROM receipts)
  AND e.event_id NOT IN (SELECT event_id FROM stored);
