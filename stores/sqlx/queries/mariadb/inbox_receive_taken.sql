-- Inbox mode: store a verified event without an ordering key if its id is new, already taken
-- by a worker of this process that waits for an event, under that worker's token and lease:
-- `inbox_receive.sql`'s receipt, and the take that would otherwise find the event, in one
-- statement (committed on its own, as the receipt is), so that no take rewrites its row.
-- Binds: event id, event type, the worker's claim token, the raw body, the stored headers (a
-- JSON array of [name, value] pairs), the path it was received on, the lease in µs.
-- Answers one row with `status` as `inbox_receive.sql` answers it, but 'stored <ms>' for the
-- event stored and taken (on its first attempt), <ms> the time it was received in Unix ms.
--
-- The row is written as a take writes it (in flight under the token, due when the lease runs
-- out, its first attempt counted), with `expires_at` and `processed_at` NULL until it is
-- completed, as a receipt writes it. On a duplicate key the row is taken over, so, only if
-- its expiry has passed (a record of the direct mode that ran out); MariaDB evaluates the
-- assignments in order, so `expires_at`, assigned last, is the old expiry in every condition.
SET STATEMENT innodb_lock_wait_timeout = {completion_lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at,
                     received_at, replayed_at, sequence, body, headers, request_path, due_at,
                     attempts, replays, last_error, history, ordering_key)
VALUES (?, ?, NULL, 'in_flight', ?, NULL, UTC_TIMESTAMP(6), NULL, NEXTVAL({table}_sequence),
        ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, 1, 0, NULL, NULL, NULL)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'in_flight', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(claim_token), claim_token),
    received_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(received_at), received_at),
    replayed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, replayed_at),
    sequence = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(sequence), sequence),
    body = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(body), body),
    headers = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(headers), headers),
    request_path = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(request_path), request_path),
    due_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(due_at), due_at),
    attempts = IF(expires_at <= UTC_TIMESTAMP(6), 1, attempts),
    replays = IF(expires_at <= UTC_TIMESTAMP(6), 0, replays),
    last_error = IF(expires_at <= UTC_TIMESTAMP(6), NULL, last_error),
    history = IF(expires_at <= UTC_TIMESTAMP(6), NULL, history),
    ordering_key = IF(expires_at <= UTC_TIMESTAMP(6), NULL, ordering_key),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, expires_at)
RETURNING CASE WHEN sequence <=> LASTVAL({table}_sequence)
                   THEN CONCAT('stored ', TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00',
                                                        received_at) DIV 1000)
               WHEN received_at IS NULL AND state = 'in_flight' THEN 'claimed'
               ELSE 'duplicate' END AS status;
