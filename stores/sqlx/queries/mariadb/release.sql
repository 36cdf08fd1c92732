-- Release a delivery's live claim (its handler failed): delete it, so that the next delivery
-- processes the event.
-- Binds: event id, the delivery's claim token.
-- Answers the deleted row's `claim_token`; no row when the token had no live claim.
-- Alone, it waits for a row lock as long as the session's own setting says; in a group commit,
-- not at all (as `complete.sql`).
SET STATEMENT innodb_lock_wait_timeout = {completion_lock_timeout_s} FOR
DELETE FROM {table}
WHERE event_id = ? AND state = 'in_flight' AND claim_token = ? AND expires_at > UTC_TIMESTAMP(6)
RETURNING claim_token;
