-- Claim many events at once (a group commit's claims of distinct ids), in one statement: each
-- row as `claim.sql` claims its one event, with the group's lock wait (none: a group that meets a
-- row another transaction holds is rolled back, and each of its writes runs again on its own,
-- under the store's lock timeout).
-- Binds: `{rows}` stands for the rows' values, `SELECT ?, ?, ?, ?, ?, ?` each, joined by
-- `UNION ALL` (in a prepared statement MariaDB reads a parameter of `VALUES (…)` as ''):
-- `claim.sql`'s binds (event id, event type, the delivery's claim token, the lease in µs, the
-- lease and the token again, unused here). A row of NULLs (the rows are padded to a power of
-- two, so that few statements are prepared) claims nothing.
-- Answers one row (`event_id`, `status`) for each event: 'completed' as `claim.sql` answers it,
-- and for a claim in flight its owner, as 'in_flight <token>': the store answers 'acquired' to
-- the claim whose token that is (MariaDB's RETURNING cannot compare the row with the values this
-- statement wrote for it, as `claim.sql`'s does with its binds).
--
-- The claims' columns are named apart from the table's, so that the ON DUPLICATE KEY UPDATE
-- clause reads exactly as `claim.sql`'s.
SET STATEMENT innodb_lock_wait_timeout = {lock_timeout_s}, lock_wait_timeout = {lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at)
WITH claims (claimed_id, claimed_type, claimed_by, lease, unused_lease, unused_token) AS (
    {rows}
)
SELECT claimed_id, claimed_type, UTC_TIMESTAMP(6), 'in_flight', claimed_by,
       UTC_TIMESTAMP(6) + INTERVAL lease MICROSECOND
FROM claims
WHERE claimed_id IS NOT NULL
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(processed_at), processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'in_flight', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    received_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, received_at),
    replayed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, replayed_at),
    sequence = IF(expires_at <= UTC_TIMESTAMP(6), NULL, sequence),
    body = IF(expires_at <= UTC_TIMESTAMP(6), NULL, body),
    headers = IF(expires_at <= UTC_TIMESTAMP(6), NULL, headers),
    request_path = IF(expires_at <= UTC_TIMESTAMP(6), NULL, request_path),
    due_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, due_at),
    attempts = IF(expires_at <= UTC_TIMESTAMP(6), 0, attempts),
    replays = IF(expires_at <= UTC_TIMESTAMP(6), 0, replays),
    last_error = IF(expires_at <= UTC_TIMESTAMP(6), NULL, last_error),
    history = IF(expires_at <= UTC_TIMESTAMP(6), NULL, history),
    ordering_key = IF(expires_at <= UTC_TIMESTAMP(6), NULL, ordering_key),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)
RETURNING event_id,
          CASE WHEN state = 'completed' THEN 'completed'
               WHEN received_at IS NOT NULL THEN 'completed'
               ELSE CONCAT('in_flight ', claim_token) END AS status;
