-- Claim many events at once (a group commit's claims of distinct ids), in one statement: each
-- row as `claim.sql` claims its one event, under the group's lock timeout (`group_begin.sql`).
-- Binds: `{rows}` stands for the rows' values, `($1::text, $2::text, $3::text, $4::bigint)`
-- each: event id, event type, the delivery's claim token, the lease in µs. A row of NULLs (the
-- rows are padded to a power of two, so that few statements are prepared) claims nothing.
-- Answers one row (`event_id`, `status`) for each event: 'acquired', 'completed' or
-- 'in_flight' as `claim.sql` answers; no row for an event whose row a concurrent claim
-- committed after this statement's snapshot (in flight).
WITH claims (event_id, event_type, claim_token, lease) AS (VALUES {rows}),
acquired AS (
    INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
    SELECT event_id, event_type, statement_timestamp(), 'in_flight', claim_token,
           statement_timestamp() + lease * INTERVAL '1 microsecond'
    FROM claims
    WHERE event_id IS NOT NULL
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
    RETURNING e.event_id
)
SELECT event_id, 'acquired' AS status FROM acquired
UNION ALL
SELECT e.event_id,
       CASE
           WHEN e.state = 'completed'
                AND (e.expires_at IS NULL OR e.expires_at > statement_timestamp())
           THEN 'completed'
           WHEN e.received_at IS NOT NULL THEN 'completed'
           ELSE 'in_flight'
       END
FROM {table} AS e
WHERE e.event_id IN (SELECT event_id FROM claims)
  AND e.event_id NOT IN (SELECT event_id FROM acquired);
