-- The state of many events' records, after `claim_many.sql` claimed none of them: each as
-- `state.sql` reads it.
-- Binds: `{ids}` stands for the event ids, `?` each (and NULLs, which match nothing).
-- Answers one row (`event_id`, `status`) for each record; none for a record gone since.
SELECT event_id, CASE WHEN received_at IS NOT NULL THEN 'completed' ELSE state END AS status
FROM {table} WHERE event_id IN ({ids});
