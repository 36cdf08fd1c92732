-- Inbox mode: store a verified event if its id is new, in one statement (committed on its own:
-- the receipt answers 2xx only once the row is durable, see `MariaDbStore::migrate`'s check of
-- the server's flush settings).
-- Binds: event id, event type, the raw body, the stored headers (a JSON array of [name, value]
-- pairs), the path it was received on, the ordering key or NULL.
-- Answers one row with `status`: 'stored' (new, or a record of the direct mode that had run
-- out, taken over), 'duplicate' (an inbox row, or a live completion of the direct mode) or
-- 'claimed' (a live claim of a direct-mode delivery: not recorded yet, so not acknowledged).
--
-- The row is written with `expires_at` and `processed_at` NULL until it is completed: neither
-- the purge by expiry nor the provider's documented `DELETE … WHERE processed_at < …` ever
-- matches a waiting, in-flight or dead event. On a duplicate key the row is taken over only if
-- its expiry has passed; MariaDB evaluates the assignments in order, so `expires_at`,
-- assigned last, is the old expiry in every condition. RETURNING reads the row as it now is:
-- it is this receipt's when it holds this statement's sequence number (LASTVAL, this session's
-- last NEXTVAL).
--
-- Alone, it waits for a row lock as long as the session's own setting says; a receipt without
-- an ordering key may run in a group commit, which waits for none (0: the group is rolled back,
-- and each of its writes runs again on its own).
--
-- A receipt with an ordering key runs under the key's lock (`inbox_key_lock.sql`, taken before
-- this statement on the same connection, released after its commit), so that the receipts and
-- replays of one key commit in the order of their sequence numbers: a take never sees a key's
-- later receipt without its earlier one. Receipts without a key take no lock, and receipts of
-- other keys do not wait for each other.
SET STATEMENT innodb_lock_wait_timeout = {completion_lock_timeout_s} FOR
INSERT INTO {table} (event_id, event_type, processed_at, state, claim_token, expires_at,
                     received_at, replayed_at, sequence, body, headers, request_path, due_at,
                     attempts, replays, last_error, history, ordering_key)
VALUES (?, ?, NULL, 'received', NULL, NULL, UTC_TIMESTAMP(6), NULL, NEXTVAL({table}_sequence),
        ?, ?, ?, UTC_TIMESTAMP(6), 0, 0, NULL, NULL, ?)
ON DUPLICATE KEY UPDATE
    event_type = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(event_type), event_type),
    processed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, processed_at),
    state = IF(expires_at <= UTC_TIMESTAMP(6), 'received', state),
    claim_token = IF(expires_at <= UTC_TIMESTAMP(6), NULL, claim_token),
    received_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(received_at), received_at),
    replayed_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, replayed_at),
    sequence = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(sequence), sequence),
    body = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(body), body),
    headers = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(headers), headers),
    request_path = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(request_path), request_path),
    due_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(due_at), due_at),
    attempts = IF(expires_at <= UTC_TIMESTAMP(6), 0, attempts),
    replays = IF(expires_at <= UTC_TIMESTAMP(6), 0, replays),
    last_error = IF(expires_at <= UTC_TIMESTAMP(6), NULL, last_error),
    history = IF(expires_at <= UTC_TIMESTAMP(6), NULL, history),
    ordering_key = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(ordering_key), ordering_key),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), NULL, expires_at)
RETURNING CASE WHEN sequence <=> LASTVAL({table}_sequence) THEN 'stored'
               WHEN received_at IS NULL AND state = 'in_flight' THEN 'claimed'
               ELSE 'duplicate' END AS status;
