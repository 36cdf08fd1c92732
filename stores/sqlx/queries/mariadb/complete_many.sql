-- Complete many events at once (a group commit's completions of distinct ids), in one
-- statement: each row as `complete.sql` completes its one event, with the group's lock wait.
-- Binds: `{rows}` stands for the rows' values, `SELECT ?, ?, ?, ?` each, joined by `UNION
-- ALL` (in a prepared statement MariaDB reads a parameter of `VALUES (…)` as ''): event id,
-- event type, the delivery's claim token, the retention in µs. A row of NULLs completes
-- nothing.
-- Answers one row (`event_id`, `claim_token`) for each event, its owner as it now is: the
-- token's when the event is completed by it.
--
-- The completions' columns are named apart from the table's, so that the ON DUPLICATE KEY
-- UPDATE clause reads exactly as `complete.sql`'s.
SET STATEMENT innodb_lock_wait_timeout = {completion_lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
WITH completions (completed_id, completed_type, completed_by, retention) AS (
    {rows}
)
SELECT completed_id, completed_type, UTC_TIMESTAMP(6), 'completed', completed_by,
       UTC_TIMESTAMP(6) + INTERVAL retention MICROSECOND
FROM completions
WHERE completed_id IS NOT NULL
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
RETURNING event_id, claim_token;
