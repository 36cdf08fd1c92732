-- Inbox mode: store a verified event if its id is new, in one statement, committed
-- synchronously whatever the session's `synchronous_commit` (the receipt answers 2xx only
-- once the row is durable).
-- Binds: $1 event id, $2 event type, $3 the raw body, $4 the stored headers (a JSON array of
-- [name, value] pairs), $5 the path it was received on, $6 the ordering key or NULL.
-- Answers one row with `status`: 'stored' (new, or a record of the direct mode that had run
-- out, taken over), 'duplicate' (an inbox row, or a live completion of the direct mode) or
-- 'claimed' (a live claim of a direct-mode delivery: not recorded yet, so not acknowledged).
--
-- The row is written with `expires_at` and `processed_at` NULL until it is completed: neither
-- the purge by expiry nor the provider's documented `DELETE … WHERE processed_at < …` ever
-- matches a waiting, in-flight or dead event.
--
-- The receipts of one ordering key take the key's transaction lock (an advisory lock on the
-- key's hash) before their sequence number, so that they commit in the order of their numbers:
-- a take never sees a key's later receipt without its earlier one. Receipts of other keys, or
-- without one, do not wait for each other.
--
-- A redelivery of an event whose row another transaction holds (a handler's own, still open)
-- waits for it at most the store's lock timeout (then the store is unavailable: 503, and the
-- provider delivers it again).
WITH settings AS (
    SELECT set_config('synchronous_commit', 'on', true),
           set_config('lock_timeout', '{lock_timeout_ms}ms', true),
           CASE WHEN $6::text IS NOT NULL
                THEN pg_advisory_xact_lock(hashtextextended($6::text, 0)) END
),
stored AS (
    INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token,
                              expires_at, received_at, replayed_at, sequence, body, headers,
                              request_path, due_at, attempts, replays, last_error, history,
                              ordering_key)
    SELECT $1, $2, NULL, 'received', NULL, NULL, statement_timestamp(), NULL,
           nextval('{table}_sequence'), $3, $4, $5, statement_timestamp(), 0, 0, NULL, NULL, $6
    FROM settings
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
    RETURNING 1
)
SELECT 'stored' AS status FROM stored
UNION ALL
SELECT CASE
           WHEN e.received_at IS NULL AND e.state = 'in_flight' THEN 'claimed'
           ELSE 'duplicate'
       END
FROM {table} AS e
WHERE e.event_id = $1 AND NOT EXISTS (SELECT 1 FROM stored);
