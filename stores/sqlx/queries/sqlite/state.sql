-- The state of an event's record, after a claim that did not acquire it (claim.sql answered no
-- row: the record is live).
-- Binds: ?1 event id.
-- Answers one row with `status`: 'completed' or 'in_flight'; no row when the record is gone
-- since (released, purged): it was in flight when the claim ran.
SELECT state AS status FROM {table} WHERE event_id = ?1;
