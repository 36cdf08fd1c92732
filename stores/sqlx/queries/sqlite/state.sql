-- The state of an event's record, after a claim that did not acquire it (claim.sql answered no
-- row: the record is live).
-- Binds: ?1 event id.
-- Answers one row with `status`: 'completed' (a live completion, or an event inbox mode
-- stored: its workers process it) or 'in_flight'; no row when the record is gone since
-- (released, purged): it was in flight when the claim ran.
SELECT CASE WHEN received_at IS NOT NULL THEN 'completed' ELSE state END AS status
FROM {table} WHERE event_id = ?1;
