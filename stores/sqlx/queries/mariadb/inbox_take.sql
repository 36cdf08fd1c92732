-- Inbox mode: take the next due event under a worker's lease, in one transaction (MariaDB has
-- no UPDATE … RETURNING). Due: waiting with its time come, or in flight with its lease run out
-- (its worker crashed or stalled; the lost attempt goes into the history); and, for an event
-- with an ordering key, no other event of its key in flight under a live lease, and no
-- unfinished (waiting or in-flight) event of its key received before it. New events first
-- (the third bind 1): an event on its first attempt since its receipt or replay, before any
-- other due event; then (or with the third bind 0, only) every due event; each in the order of
-- receipt.
-- Binds (the first statement): the worker's claim token, the lease in µs, 1 to take new events
-- first (0: every due event in the order of receipt).
-- Answers the taken event (id, type, body, headers, path, received and budget start in Unix
-- milliseconds, this attempt's number, ordering key), or no row when nothing is due.
--
-- The first statement keeps the binds in session variables (the token as ASCII, compared byte
-- for byte like the column); the UPDATE's assignments are evaluated in order, so the history
-- reads the state and the attempts before they change.
--
-- A take locks only the event it takes, as far as it can: InnoDB keeps the lock of every row a
-- locking search reads and passes over (a retry not due yet, an event its key holds back) until
-- the take commits. So each search is a plain read first, which finds the first event the take
-- may hand out (`@sangho_fresh_from`, `@sangho_due_from`: its sequence number), then a locking
-- read from there (`FOR UPDATE SKIP LOCKED`: concurrent takes pass over the events other takes
-- lock, so that no two take one event), which stops at the first event it can lock: the new
-- events by the index on (state, attempts, sequence), then the waiting ones by the index on
-- (state, sequence). An earlier event whose lease ran out is found by a plain read of the index
-- on (state, due_at), which holds only those before the present, then locked by its id: no
-- event in flight is ever locked by a take that passes over it (its worker's completion would
-- wait for the take). Each search names its index (`FORCE INDEX`): with few unfinished events
-- the optimizer would rather read every unfinished event for each ordering key's test than the
-- key's few by the index on (ordering_key, state, sequence).
--
-- Plain reads and the subqueries of a locking read are consistent reads: they lock nothing and
-- wait for no lock, and see the rows as committed when the statement first read. The searches
-- test the ordering key's rule that way, to pass over the events their keys hold back; but a
-- locking read sees its row as committed now, possibly after what its subquery read, so the
-- test a search made may be out of date by the time its event is locked. Once the event is
-- locked, a statement of its own tests the rule again, as committed by then, and the take hands
-- out nothing (its worker takes again soon) if the key holds the event back. That test is the
-- one the rule rests on. Of two concurrent takes of events A and B of one key, A received
-- before B: the take of B tests after locking B; A was committed before B was (receipts and
-- replays of one key commit in the order of their sequence numbers, under the key's lock, see
-- inbox_key_lock.sql), so the test reads A: waiting or in flight with its lease run out (the
-- take of A has not committed) or in flight under a live lease (it has): unfinished either way,
-- and B is held back. Only A's completion, or its death, committed before the test frees B. A
-- locked event's sequence number cannot change meanwhile: a replay gives one only under the
-- event's row lock.
SET @sangho_token = CONVERT(? USING ascii) COLLATE ascii_bin, @sangho_lease = ?,
    @sangho_fresh = ?, @sangho_taken = NULL, @sangho_sequence = NULL, @sangho_key = NULL,
    @sangho_fresh_from = NULL, @sangho_due_from = NULL, @sangho_lost = NULL;
SELECT c.sequence INTO @sangho_fresh_from
FROM {table} AS c FORCE INDEX (idx_webhook_fresh)
WHERE @sangho_fresh = 1 AND c.state = 'received' AND c.attempts = 0
  AND c.due_at <= UTC_TIMESTAMP(6)
  AND (c.ordering_key IS NULL
       OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                       WHERE k.ordering_key = c.ordering_key AND k.state = 'received'
                         AND k.sequence < c.sequence)
           AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                           WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                             AND (k.sequence < c.sequence
                                  OR k.due_at > UTC_TIMESTAMP(6)))))
ORDER BY c.sequence
LIMIT 1;
SELECT c.event_id, c.sequence, c.ordering_key
INTO @sangho_taken, @sangho_sequence, @sangho_key
FROM {table} AS c FORCE INDEX (idx_webhook_fresh)
WHERE c.state = 'received' AND c.attempts = 0 AND c.sequence >= @sangho_fresh_from
  AND c.due_at <= UTC_TIMESTAMP(6)
  AND (c.ordering_key IS NULL
       OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                       WHERE k.ordering_key = c.ordering_key AND k.state = 'received'
                         AND k.sequence < c.sequence)
           AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                           WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                             AND (k.sequence < c.sequence
                                  OR k.due_at > UTC_TIMESTAMP(6)))))
ORDER BY c.sequence
LIMIT 1
FOR UPDATE SKIP LOCKED;
SELECT
    (SELECT c.sequence FROM {table} AS c FORCE INDEX (idx_webhook_unfinished)
     WHERE c.state = 'received' AND c.due_at <= UTC_TIMESTAMP(6)
       AND (c.ordering_key IS NULL
            OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                            WHERE k.ordering_key = c.ordering_key AND k.state = 'received'
                              AND k.sequence < c.sequence)
                AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                                WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                                  AND (k.sequence < c.sequence
                                       OR k.due_at > UTC_TIMESTAMP(6)))))
     ORDER BY c.sequence
     LIMIT 1),
    (SELECT c.event_id FROM {table} AS c FORCE INDEX (idx_webhook_leases)
     WHERE c.state = 'in_flight' AND c.due_at <= UTC_TIMESTAMP(6)
       AND (c.ordering_key IS NULL
            OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                            WHERE k.ordering_key = c.ordering_key AND k.state = 'received'
                              AND k.sequence < c.sequence)
                AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                                WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                                  AND (k.sequence < c.sequence
                                       OR k.due_at > UTC_TIMESTAMP(6)))))
     ORDER BY c.sequence
     LIMIT 1)
INTO @sangho_due_from, @sangho_lost
FROM DUAL
WHERE @sangho_taken IS NULL;
SELECT c.event_id, c.sequence, c.ordering_key
INTO @sangho_taken, @sangho_sequence, @sangho_key
FROM {table} AS c FORCE INDEX (idx_webhook_unfinished)
WHERE c.state = 'received' AND c.sequence >= @sangho_due_from AND c.due_at <= UTC_TIMESTAMP(6)
  AND (c.ordering_key IS NULL
       OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                       WHERE k.ordering_key = c.ordering_key AND k.state = 'received'
                         AND k.sequence < c.sequence)
           AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
                           WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                             AND (k.sequence < c.sequence
                                  OR k.due_at > UTC_TIMESTAMP(6)))))
ORDER BY c.sequence
LIMIT 1
FOR UPDATE SKIP LOCKED;
SELECT event_id, sequence, ordering_key
INTO @sangho_taken, @sangho_sequence, @sangho_key
FROM {table}
WHERE event_id = @sangho_lost AND state = 'in_flight' AND due_at <= UTC_TIMESTAMP(6)
  AND sequence < COALESCE(@sangho_sequence, ~0)
FOR UPDATE SKIP LOCKED;
SELECT NULL INTO @sangho_taken
FROM {table} AS k FORCE INDEX (idx_webhook_ordering)
WHERE k.ordering_key = @sangho_key AND k.state IN ('received', 'in_flight')
  AND k.event_id <> @sangho_taken
  AND (k.sequence < @sangho_sequence
       OR (k.state = 'in_flight' AND k.due_at > UTC_TIMESTAMP(6)))
LIMIT 1;
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
       CAST(attempts AS SIGNED), ordering_key
FROM {table}
WHERE event_id = @sangho_taken;
