-- Claim an event for a delivery, in one statement, with the statement's own lock wait bound.
-- Binds: event id, event type, the delivery's claim token, the lease in µs; then the lease
-- and the token again (for RETURNING).
-- Answers one row with `status`: 'acquired' (the claim is the delivery's), 'completed' (a live
-- completion, or an event inbox mode stored: its workers process it) or 'in_flight' (another
-- delivery's live claim).
--
-- On a duplicate key the row is taken over if its expiry has passed (an inbox event's columns
-- are cleared then: it is a record of this mode from now on) and left as it is otherwise; an
-- inbox event keeps `expires_at` NULL until it is completed, so it is never taken over
-- before. RETURNING reads the row as it now is: the claim is the delivery's when the row
-- holds its token with this statement's expiry (this statement's time plus the lease).
-- `expires_at` is assigned last: MariaDB evaluates the assignments in order, so every
-- condition still sees the old expiry. UTC_TIMESTAMP(6) is the statement's start: one clock
-- reading.
SET STATEMENT innodb_lock_wait_timeout = {lock_timeout_s}, lock_wait_timeout = {lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), 'in_flight', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at), processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'in_flight', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    received_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, received_at),
    replayed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, replayed_at),
    sequence = IF(expires_at <= UTC_TIMESTAMP(6), NULL, sequence),
    body = IF(expires_at <= UTC_TIMESTAMP(6), NULL, body),
    headers = IF(expires_at <= UTC_TIMESTAMP(6), NULL, headers),
    request_path = IF(expires_at <= UTC_TIMESTAMP(6), NULL, request_path),
    due_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, due_at),
    attempts = IF(expires_at <= UTC_TIMESTAMP(6), 0, attempts),
    replays = IF(expires_at <= UTC_TIMESTAMP(6), 0, replays),
    last_error = IF(expires_at <= UTC_TIMESTAMP(6), NULL, last_error),
    history = IF(expires_at <= UTC_TIMESTAMP(6), NULL, history),
    ordering_key = IF(expires_at <= UTC_TIMESTAMP(6), NULL, ordering_key),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)
RETURNING CASE WHEN state = 'completed' THEN 'completed'
               WHEN expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
                    AND claim_token = ? THEN 'acquired'
               WHEN received_at IS NOT NULL THEN 'completed'
               ELSE 'in_flight' END AS status;
