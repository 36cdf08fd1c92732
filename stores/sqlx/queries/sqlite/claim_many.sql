-- Claim many events at once (a group commit's claims of distinct ids), in one statement: each
-- row as `claim.sql` claims its one event.
-- Binds: `{rows}` stands for the rows' values, `(?, ?, ?, ?)` each: event id, event type,
-- the delivery's claim token, the lease in µs. A row of NULLs (the rows are padded to a
-- power of two, so that few statements are prepared) claims nothing.
-- Answers one row (`event_id`, `status` 'acquired') for each event claimed; no row for an
-- event a live record is in the way of: then `state_many.sql` reads which.
WITH claims (event_id, event_type, claim_token, lease) AS (VALUES {rows})
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
SELECT event_id, event_type, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'in_flight', claim_token,
       CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + lease / 1000
FROM claims
WHERE event_id IS NOT NULL
ON CONFLICT (event_id) DO UPDATE SET
    event_type = excluded.event_type,
    processed_at = excluded.processed_at,
    state = 'in_flight',
    claim_token = excluded.claim_token,
    expires_at = excluded.expires_at,
    received_at = NULL, replayed_at = NULL, sequence = NULL, body = NULL, headers = NULL,
    request_path = NULL, due_at = NULL, attempts = 0, replays = 0, last_error = NULL,
    history = NULL, ordering_key = NULL
WHERE e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
RETURNING event_id, 'acquired' AS status;
