-- Release a delivery's live claim (its handler failed): delete it, so that the next delivery
-- processes the event. Always committed asynchronously: losing a release only makes the next
-- delivery wait for the lease.
-- Binds: $1 event id, $2 the delivery's claim token.
-- Answers the deleted row's `claim_token`; no row when the token had no live claim.
WITH commit_mode AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM {table} USING commit_mode
WHERE event_id = $1 AND state = 'in_flight' AND claim_token = $2
  AND expires_at > statement_timestamp()
RETURNING claim_token;
