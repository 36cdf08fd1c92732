-- Inbox mode: take due events, up to one for each worker that waits for one, under each
-- worker's lease, in one transaction at READ COMMITTED (MariaDB has no UPDATE … RETURNING).
-- The store runs these statements in turn, each with the binds its comment names, and keeps
-- what they answer between them (`take_many` in the MariaDB dialect):
--
-- 1. and 2. With new events first: the first new event the take may hand out (a plain read),
--    then up to N of them from there (a locking read), N the number of waiting workers.
-- 3., 4. and 5. Without new events first, or when 1. found none: the first due event of any
--    attempt and the first whose lease ran out (a plain read), that one locked, then up to N
--    (less that one) due events from the first (a locking read).
-- 6. The ordering keys' rule, tested again on the locked events: the events it holds back.
-- 7. The taken events go in flight, each under its worker's token. The workers get the
--    events as the locking reads answered them, each with its attempt counted: a locked row
--    changes only by statement 7, and a statement that read them again would cost each turn a
--    round trip.
-- One take runs one search, new events or due ones: workers left without an event by a take
-- that found some wait for the next.
--
-- Due: waiting with its time come, or in flight with its lease run out (its worker crashed or
-- stalled; the lost attempt goes into the history); and, for an event with an ordering key, no
-- other event of its key in flight under a live lease, and no unfinished (waiting or
-- in-flight) event of its key received before it. New events: on their first attempt since
-- their receipt or replay. Each search hands out events in the order of receipt.
--
-- A take locks only the events it may hand out, as far as it can: InnoDB keeps the lock of
-- every row a locking search reads and passes over (a retry not due yet, an event its key
-- holds back) until the take commits. So each search is a plain read first, which finds the
-- first event the take may hand out (its sequence number), then a locking read from there
-- (`FOR UPDATE SKIP LOCKED`: concurrent takes pass over the events other takes lock, so that
-- no two take one event), which stops once it has locked N: the new events by the index on
-- (inbox_state, attempts, sequence), the waiting ones by the index on (inbox_state,
-- sequence). An earlier event whose lease ran out is found by a plain read of the index on
-- (inbox_state, due_at), which holds only those before the present, then locked by its id: no
-- event in flight is ever locked by a take that passes over it (its worker's completion would
-- wait for the take). Each search names its index (`FORCE INDEX`): with few unfinished events
-- the optimizer would rather read every unfinished event for each ordering key's test than the
-- key's few by the index on (ordering_key, inbox_state, sequence). The searches test
-- `inbox_state` (an inbox event's state; NULL on a row of the direct mode), not `state`: the
-- indexes are keyed on it, and an index of a generated column serves only a statement that
-- names the column.
--
-- Plain reads and the subqueries of a locking read are consistent reads: they lock nothing and
-- wait for no lock, and see the rows as committed when the statement first read. The searches
-- test the ordering key's rule that way, to pass over the events their keys hold back (of two
-- waiting events of one key, the later one is held back by the earlier: one search never
-- locks both); but a locking read sees its row as committed now, possibly after what its
-- subquery read, so the test a search made may be out of date by the time its event is
-- locked. Once the events are locked, statement 6 tests the rule again, as committed by then,
-- and the take hands out none that the rule holds back. That test is the one the rule rests
-- on. Of two concurrent takes of events A and B of one key, A received before B: the take of
-- B tests after locking B; A was committed before B was (receipts and replays of one key
-- commit in the order of their sequence numbers, under the key's lock, see
-- inbox_key_lock.sql), so the test reads A: waiting or in flight with its lease run out (the
-- take of A has not committed) or in flight under a live lease (it has): unfinished either
-- way, and B is held back. Only A's completion, or its death, committed before the test frees
-- B. A locked event's sequence number cannot change meanwhile: a replay gives one only under
-- the event's row lock.
--
-- 1. No binds. Answers the first new event's sequence number, or no row.
SELECT c.sequence
FROM {table} AS c FORCE INDEX (idx_webhook_new_events)
WHERE c.inbox_state = 'received' AND c.attempts = 0 AND c.due_at <= UTC_TIMESTAMP(6)
  AND (c.ordering_key IS NULL
       OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                       WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'received'
                         AND k.sequence < c.sequence)
           AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                           WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'in_flight'
                             AND (k.sequence < c.sequence
                                  OR k.due_at > UTC_TIMESTAMP(6)))))
ORDER BY c.sequence
LIMIT 1;
-- 2. Binds: the sequence number 1 answered, N. Answers the locked events: the sequence number,
-- then what the worker gets (id, type, body, headers, path, received and budget start in Unix
-- ms, the attempts before this one, ordering key).
SELECT c.sequence, c.event_id, c.event_type, c.body, c.headers, c.request_path,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', c.received_at) DIV 1000 AS SIGNED),
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', COALESCE(c.replayed_at, c.received_at)) DIV 1000 AS SIGNED),
       CAST(c.attempts AS SIGNED), c.ordering_key
FROM {table} AS c FORCE INDEX (idx_webhook_new_events)
WHERE c.inbox_state = 'received' AND c.attempts = 0 AND c.sequence >= ?
  AND c.due_at <= UTC_TIMESTAMP(6)
  AND (c.ordering_key IS NULL
       OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                       WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'received'
                         AND k.sequence < c.sequence)
           AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                           WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'in_flight'
                             AND (k.sequence < c.sequence
                                  OR k.due_at > UTC_TIMESTAMP(6)))))
ORDER BY c.sequence
LIMIT ?
FOR UPDATE SKIP LOCKED;
-- 3. No binds. Answers one row: the first waiting event's sequence number, and the id of the
-- first event whose lease ran out (each NULL when there is none).
SELECT
    (SELECT c.sequence FROM {table} AS c FORCE INDEX (idx_webhook_queue)
     WHERE c.inbox_state = 'received' AND c.due_at <= UTC_TIMESTAMP(6)
       AND (c.ordering_key IS NULL
            OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                            WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'received'
                              AND k.sequence < c.sequence)
                AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                                WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'in_flight'
                                  AND (k.sequence < c.sequence
                                       OR k.due_at > UTC_TIMESTAMP(6)))))
     ORDER BY c.sequence
     LIMIT 1) AS due_from,
    (SELECT c.event_id FROM {table} AS c FORCE INDEX (idx_webhook_lease_ends)
     WHERE c.inbox_state = 'in_flight' AND c.due_at <= UTC_TIMESTAMP(6)
       AND (c.ordering_key IS NULL
            OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                            WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'received'
                              AND k.sequence < c.sequence)
                AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                                WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'in_flight'
                                  AND (k.sequence < c.sequence
                                       OR k.due_at > UTC_TIMESTAMP(6)))))
     ORDER BY c.sequence
     LIMIT 1) AS lost
FROM DUAL;
-- 4. Binds: the id 3 answered. Answers the event whose lease ran out, locked (the columns of
-- 2.), or no row (another take has it, or its worker completed it since).
SELECT sequence, event_id, event_type, body, headers, request_path,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', received_at) DIV 1000 AS SIGNED),
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', COALESCE(replayed_at, received_at)) DIV 1000 AS SIGNED),
       CAST(attempts AS SIGNED), ordering_key
FROM {table}
WHERE event_id = ? AND state = 'in_flight' AND due_at <= UTC_TIMESTAMP(6)
FOR UPDATE SKIP LOCKED;
-- 5. Binds: the sequence number 3 answered, N (less the event 4 locked). Answers the locked
-- events (the columns of 2.).
SELECT c.sequence, c.event_id, c.event_type, c.body, c.headers, c.request_path,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', c.received_at) DIV 1000 AS SIGNED),
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', COALESCE(c.replayed_at, c.received_at)) DIV 1000 AS SIGNED),
       CAST(c.attempts AS SIGNED), c.ordering_key
FROM {table} AS c FORCE INDEX (idx_webhook_queue)
WHERE c.inbox_state = 'received' AND c.sequence >= ? AND c.due_at <= UTC_TIMESTAMP(6)
  AND (c.ordering_key IS NULL
       OR (NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                       WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'received'
                         AND k.sequence < c.sequence)
           AND NOT EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
                           WHERE k.ordering_key = c.ordering_key AND k.inbox_state = 'in_flight'
                             AND (k.sequence < c.sequence
                                  OR k.due_at > UTC_TIMESTAMP(6)))))
ORDER BY c.sequence
LIMIT ?
FOR UPDATE SKIP LOCKED;
-- 6. Binds: the locked events' ids ({ids}: one placeholder each, padded with NULL). Answers
-- the ids of those an unfinished event of their key holds back: one received before it, or
-- one in flight under a live lease.
SELECT c.event_id
FROM {table} AS c
WHERE c.event_id IN ({ids}) AND c.ordering_key IS NOT NULL
  AND EXISTS (SELECT 1 FROM {table} AS k FORCE INDEX (idx_webhook_key_order)
              WHERE k.ordering_key = c.ordering_key AND k.inbox_state IN ('received', 'in_flight')
                AND k.event_id <> c.event_id
                AND (k.sequence < c.sequence
                     OR (k.inbox_state = 'in_flight' AND k.due_at > UTC_TIMESTAMP(6))));
-- 7. Binds: each taken event's id and its worker's token ({tokens}: `WHEN ? THEN ?` for each),
-- the lease in µs, the taken events' ids ({ids}). The assignments are evaluated in order, so
-- the history reads the state and the attempts before they change.
UPDATE {table}
SET last_error = IF(state = 'in_flight', 'the lease ran out', last_error),
    history = IF(state = 'in_flight',
                 RIGHT(CONCAT(COALESCE(history, ''), CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'),
                              ' attempt ', attempts, ': the lease ran out', CHAR(10 USING utf8mb4)),
                       8192),
                 history),
    attempts = attempts + 1,
    state = 'in_flight',
    claim_token = CASE event_id {tokens} END,
    due_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE event_id IN ({ids});
