-- Complete an event, in one statement: record it as completed by the token unless another
-- owner holds or completed it (a live record with another token). The layer's completion and
-- `complete_in` (inside the handler's transaction) both run it.
-- Binds: event id, event type, the delivery's claim token, the retention in µs.
-- Answers the row's `claim_token` as it now is: the token's when the event is completed by it.
-- Alone, it waits for a row lock as long as the session's own setting says
-- (`{completion_lock_timeout_s}` is the session's value); in a group commit, not at all (0: the
-- group is rolled back and each of its writes runs again on its own).
-- Evaluated in order, as in renew.sql. When the token's own record is live, `processed_at` is
-- kept (and so its index entry); an inbox event its worker holds is completed the same way
-- (its `processed_at` and `expires_at` are NULL until then, and set now).
SET STATEMENT innodb_lock_wait_timeout = {completion_lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), 'completed', ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at),
                      IF(claim_token = VALUES(claim_token),
                         COALESCE(processed_at, VALUES(processed_at)), processed_at)),
    due_at = IF(expires_at <= UTC_TIMESTAMP(6) OR claim_token = VALUES(claim_token),
                NULL, due_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6) OR claim_token = VALUES(claim_token),
               'completed', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6) OR claim_token = VALUES(claim_token),
                    VALUES(expires_at), expires_at)
RETURNING claim_token;
