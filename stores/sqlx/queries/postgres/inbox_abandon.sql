-- Inbox mode: give an event back at shutdown (owner-checked): due at once, and the attempt
-- does not count.
-- Binds: $1 event id, $2 the worker's claim token.
-- Answers 'abandoned' when the event was given back; no row when the token did not hold it.
WITH given_back AS (
    UPDATE {table}
    SET state = 'received', claim_token = NULL, due_at = statement_timestamp(),
        attempts = GREATEST(attempts - 1, 0)
    WHERE event_id = $1 AND claim_token = $2 AND state = 'in_flight'
      AND received_at IS NOT NULL
    RETURNING 'abandoned' AS abandoned
)
SELECT abandoned FROM given_back;
