-- Inbox mode: take the due event received first under a worker's lease, in one transaction
-- (MariaDB has no UPDATE … RETURNING). Due: waiting with its time come, or in flight with its
-- lease run out (its worker crashed or stalled; the lost attempt goes into the history).
-- `SKIP LOCKED`: concurrent takes pass over the row another take is locking, so that no two
-- take one event.
-- Binds (the first statement): the worker's claim token, the lease in µs.
-- Answers the taken event (id, type, body, headers, path, received and budget start in Unix
-- milliseconds, this attempt's number), or no row when nothing is due.
--
-- The first statement keeps the binds in session variables (the token as ASCII, compared byte
-- for byte like the column); the UPDATE's assignments are evaluated in order, so the history
-- reads the state and the attempts before they change.
--
-- One search per state. The waiting event received first, in the order of the index on
-- (state, sequence), so that InnoDB stops at the first due row it can lock (`SKIP LOCKED`; a
-- single search over both states would read and lock every due row to sort them, and
-- concurrent takes would skip them all). Then an earlier event whose lease ran out, if there
-- is one, by the index on (state, due_at), which holds only those before the present: found
-- by a plain read, then locked by its id, so that no event in flight is ever locked by a
-- take that passes over it (its worker's completion would wait for the take).
SET @sangho_token = CONVERT(? USING ascii) COLLATE ascii_bin, @sangho_lease = ?,
    @sangho_taken = NULL, @sangho_sequence = NULL, @sangho_lost = NULL;
SELECT event_id, sequence INTO @sangho_taken, @sangho_sequence FROM {table}
WHERE state = 'received' AND due_at <= UTC_TIMESTAMP(6)
ORDER BY sequence
LIMIT 1
FOR UPDATE SKIP LOCKED;
SELECT event_id INTO @sangho_lost FROM {table}
WHERE state = 'in_flight' AND due_at <= UTC_TIMESTAMP(6)
  AND sequence < COALESCE(@sangho_sequence, ~0)
ORDER BY due_at
LIMIT 1;
SELECT event_id INTO @sangho_taken FROM {table}
WHERE event_id = @sangho_lost AND state = 'in_flight' AND due_at <= UTC_TIMESTAMP(6)
FOR UPDATE SKIP LOCKED;
UPDATE {table}
SET last_error = IF(state = 'in_flight', 'the lease ran out', last_error),
    history = IF(state = 'in_flight',
                 RIGHT(CONCAT(COALESCE(history, ''), CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'),
                              ' attempt ', attempts, ': the lease ran out', CHAR(10 USING utf8mb4)),
                       8192),
                 history),
    attempts = attempts + 1,
    state = 'in_flight',
    claim_token = @sangho_token,
    due_at = UTC_TIMESTAMP(6) + INTERVAL @sangho_lease MICROSECOND
WHERE event_id = @sangho_taken;
SELECT event_id, event_type, body, headers, request_path,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', received_at) DIV 1000 AS SIGNED),
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', COALESCE(replayed_at, received_at)) DIV 1000 AS SIGNED),
       CAST(attempts AS SIGNED)
FROM {table}
WHERE event_id = @sangho_taken;
