-- Inbox mode: extend a worker's lease (owner-checked; a lease that ran out is extended too
-- while nobody took the event over). A completion by the token answers the token unchanged.
-- Binds: ?1 event id, ?2 the worker's claim token, ?3 the lease in µs.
-- Answers the row's `claim_token` when the token holds the event; no row otherwise.
UPDATE {table}
SET due_at = CASE WHEN state = 'in_flight' THEN CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + ?3 / 1000 ELSE due_at END
WHERE event_id = ?1 AND claim_token = ?2 AND state IN ('in_flight', 'completed')
  AND received_at IS NOT NULL
RETURNING claim_token;
