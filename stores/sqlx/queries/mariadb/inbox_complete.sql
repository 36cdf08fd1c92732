-- Inbox mode: record the event as completed by a worker's token (owner-checked; a repeated
-- completion succeeds), in one statement committed on its own. From now on it is a completed
-- record like the direct mode's: a duplicate until `expires_at`, then the purge deletes it;
-- `processed_at` says when.
-- Binds: event id, the worker's claim token, the retention in µs.
-- Answers by the rows it matched (MariaDB has no UPDATE … RETURNING; the store connects with
-- CLIENT_FOUND_ROWS, so a row that is already completed by the token counts, unchanged): 1
-- when the event is completed by the token, 0 otherwise.
--
-- The binds take the columns' collations (a bound value yields to a column), so the token is
-- compared byte for byte, and the event id by the primary key.
--
-- The assignments are evaluated in order: `state`, assigned last, is the old state in every
-- condition.
UPDATE {table}
SET processed_at = IF(state = 'completed', processed_at, UTC_TIMESTAMP(6)),
    expires_at = IF(state = 'completed', expires_at,
                    UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND),
    due_at = NULL,
    state = 'completed'
WHERE event_id = ? AND claim_token = ?
  AND state IN ('in_flight', 'completed') AND received_at IS NOT NULL;
