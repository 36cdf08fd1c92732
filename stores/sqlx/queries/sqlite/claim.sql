-- Claim an event for a delivery: record the claim, or take over a row whose lease (or
-- retention) has expired. `expires_at` is Unix time in milliseconds, `now` the same for the
-- whole statement.
-- Binds: ?1 event id, ?2 event type, ?3 the delivery's claim token, ?4 the lease in µs.
-- Answers one row with `status` 'acquired' when the claim is the delivery's; no row when a live
-- record is in the way: then the store reads its state (state.sql). A row whose expiry has
-- passed is taken over; an inbox event's columns are cleared then (it is a record of this mode
-- from now on). An unfinished inbox event has no expiry: never taken over.
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'in_flight', ?3,
        CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + ?4 / 1000)
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
RETURNING 'acquired' AS status;
