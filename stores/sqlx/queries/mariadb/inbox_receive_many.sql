-- Inbox mode: store many verified events at once (a group commit's receipts of distinct ids,
-- without ordering keys), in one statement: each row as `inbox_receive.sql` stores its one
-- event, or, where a worker's take waits for its turn, as `inbox_receive_taken.sql` stores it
-- already taken by that worker; with the group's lock wait (none: a group that meets a row
-- another transaction holds is rolled back, and each of its writes runs again on its own).
-- Binds: `{rows}` stands for the rows' values, `SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?` each, joined
-- by `UNION ALL` (in a prepared statement MariaDB reads a parameter of `VALUES (…)` as ''):
-- `inbox_receive.sql`'s binds (event id, event type, the raw body, the stored headers, the path
-- it was received on, the ordering key or NULL), the claim token and the lease in µs of the
-- waiting take the event goes to (NULL and NULL for none), then the receipt's sequence number,
-- drawn before by `inbox_receive_numbers.sql`. A row of NULLs (the rows are padded to a power
-- of two, so that few statements are prepared) stores nothing.
-- Answers one row (`event_id`, `status`) for each event: 'claimed' as `inbox_receive.sql`
-- answers it, 'duplicate' for a row without a sequence number (a completion of the direct
-- mode), and otherwise the sequence number the row now holds and the time it was received in
-- Unix ms, as 'sequence <n> <ms>': the store answers 'stored <ms>' to the receipt that drew
-- that number and 'duplicate' to any other (MariaDB's RETURNING cannot compare the row with
-- the values this statement wrote for it, as `inbox_receive.sql`'s does with LASTVAL).
--
-- The receipts' columns are named apart from the table's, so that the ON DUPLICATE KEY UPDATE
-- clause reads as `inbox_receive.sql`'s, but for the three assignments that take the values
-- this statement wrote for the row (`VALUES(…)`): a row taken over is written received or
-- taken, as the new row is.
SET STATEMENT innodb_lock_wait_timeout = {completion_lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at,
                     received_at, replayed_at, sequence, body, headers, request_path, due_at,
                     attempts, replays, last_error, history, ordering_key)
WITH receipts (received_id, received_type, received_body, received_headers, received_path,
               received_key, received_token, received_lease, received_number) AS (
    {rows}
)
SELECT received_id, received_type, NULL, IF(received_token IS NULL, 'received', 'in_flight'),
       received_token, NULL, UTC_TIMESTAMP(6), NULL, received_number, received_body,
       received_headers, received_path,
       UTC_TIMESTAMP(6) + INTERVAL IFNULL(received_lease, 0) MICROSECOND,
       IF(received_token IS NULL, 0, 1), 0, NULL, NULL, received_key
FROM receipts
WHERE received_id IS NOT NULL
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(state), state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    received_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(received_at), received_at),
    replayed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, replayed_at),
    sequence = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(sequence), sequence),
    body = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(body), body),
    headers = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(headers), headers),
    request_path = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(request_path), request_path),
    due_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(due_at), due_at),
    attempts = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(attempts), attempts),
    replays = IF(expires_at <= UTC_TIMESTAMP(6), 0, replays),
    last_error = IF(expires_at <= UTC_TIMESTAMP(6), NULL, last_error),
    history = IF(expires_at <= UTC_TIMESTAMP(6), NULL, history),
    ordering_key = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(ordering_key), ordering_key),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, expires_at)
RETURNING event_id,
          CASE WHEN received_at IS NULL AND state = 'in_flight' THEN 'claimed'
               WHEN sequence IS NULL THEN 'duplicate'
               ELSE CONCAT('sequence ', sequence, ' ',
                           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', received_at) DIV 1000)
               END AS status;
