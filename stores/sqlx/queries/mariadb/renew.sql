-- Renew a delivery's claim, in one statement, with the statement's own lock wait bound: extend
-- the token's live claim, or record it again when the event has no live record; another
-- owner's live record (and the token's own live completion) is left as it is.
-- Binds: event id, event type, the delivery's claim token, the lease in µs.
-- Answers the row's `claim_token` as it now is: the token's when the renewal holds.
--
-- `state` and `claim_token` change only when the row had expired, so the last condition still
-- reads the old owner and state, and `expires_at`, assigned last, is the old expiry in every
-- condition.
SET STATEMENT innodb_lock_wait_timeout = {lock_timeout_s}, lock_wait_timeout = {lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), 'in_flight', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at), processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'in_flight', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6)
                    OR (claim_token = VALUES(claim_token) AND state = 'in_flight'),
                    VALUES(expires_at), expires_at)
RETURNING claim_token;
