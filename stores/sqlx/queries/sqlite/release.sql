-- Release a delivery's live claim (its handler failed): delete it, so that the next delivery
-- processes the event.
-- Binds: ?1 event id, ?2 the delivery's claim token.
-- Answers the deleted row's `claim_token`; no row when the token had no live claim.
DELETE FROM {table}
WHERE event_id = ?1 AND state = 'in_flight' AND claim_token = ?2
  AND expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
RETURNING claim_token;
