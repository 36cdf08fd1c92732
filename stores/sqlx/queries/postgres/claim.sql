-- Claim an event for a delivery, in one statement.
-- Binds: $1 event id, $2 event type, $3 the delivery's claim token, $4 the lease in µs.
-- Answers one row with `status`: 'acquired' (the claim is the delivery's), 'completed' (a live
-- completion, or an event inbox mode stored: its workers process it) or 'in_flight' (another
-- delivery's live claim); or no row: in flight (a row a concurrent claim committed after this
-- statement's snapshot).
--
-- `settings` sets the statement's own commit mode and lock timeout before the insert reads its
-- row. The insert records the claim, or takes over a row whose lease (or retention) has
-- expired (an inbox event's columns are cleared then: it is a record of this mode from now
-- on); when it did neither, the outer SELECT tells completed from in flight.
WITH settings AS (
    SELECT CASE WHEN {asynchronous_commit}
                THEN set_config('synchronous_commit', 'off', true) END,
           set_config('lock_timeout', '{lock_timeout_ms}ms', true)
),
acquired AS (
    INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
    SELECT $1, $2, statement_timestamp(), 'in_flight', $3,
           statement_timestamp() + $4 * INTERVAL '1 microsecond'
    FROM settings
    ON CONFLICT (event_id) DO UPDATE
        SET event_type = EXCLUDED.event_type,
            processed_at = EXCLUDED.processed_at,
            state = 'in_flight',
            claim_token = EXCLUDED.claim_token,
            expires_at = EXCLUDED.expires_at,
            received_at = NULL, replayed_at = NULL, sequence = NULL, body = NULL,
            headers = NULL, request_path = NULL, due_at = NULL, attempts = 0, replays = 0,
            last_error = NULL, history = NULL, ordering_key = NULL
        WHERE e.expires_at <= statement_timestamp()
    RETURNING 1
)
SELECT 'acquired' AS status FROM acquired
UNION ALL
SELECT CASE
           WHEN e.state = 'completed'
                AND (e.expires_at IS NULL OR e.expires_at > statement_timestamp())
           THEN 'completed'
           WHEN e.received_at IS NOT NULL THEN 'completed'
           ELSE 'in_flight'
       END
FROM {table} AS e
WHERE e.event_id = $1 AND NOT EXISTS (SELECT 1 FROM acquired);
