-- Renew a delivery's claim, in one statement: extend the token's live claim, or record it again
-- when the event has no live record. A live completion by the token is rewritten unchanged.
-- Binds: $1 event id, $2 event type, $3 the delivery's claim token, $4 the lease in µs.
-- Answers the row's `claim_token` when the row is now the token's; no row when another
-- owner's live record was left alone. `settings` as in claim.sql.
WITH settings AS (
    SELECT CASE WHEN {asynchronous_commit}
                THEN set_config('synchronous_commit', 'off', true) END,
           set_config('lock_timeout', '{lock_timeout_ms}ms', true)
)
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
SELECT $1, $2, statement_timestamp(), 'in_flight', $3,
       statement_timestamp() + $4 * INTERVAL '1 microsecond'
FROM settings
ON CONFLICT (event_id) DO UPDATE
    SET event_type = CASE WHEN e.expires_at <= statement_timestamp()
                          THEN EXCLUDED.event_type ELSE e.event_type END,
        processed_at = CASE WHEN e.expires_at <= statement_timestamp()
                            THEN EXCLUDED.processed_at ELSE e.processed_at END,
        state = CASE WHEN e.expires_at <= statement_timestamp()
                     THEN 'in_flight' ELSE e.state END,
        claim_token = EXCLUDED.claim_token,
        expires_at = CASE WHEN e.state = 'completed' AND e.expires_at > statement_timestamp()
                          THEN e.expires_at ELSE EXCLUDED.expires_at END
    WHERE e.claim_token = $3 OR e.expires_at <= statement_timestamp()
RETURNING claim_token;
