-- Inbox mode: take the next due event under a worker's lease, in one statement.
-- Due: waiting with its time come, or in flight with its lease run out (its worker crashed or
-- stalled; the lost attempt goes into the history); and, for an event with an ordering key,
-- no other event of its key in flight under a live lease, and no unfinished event of its key
-- received before it. New events first (?3 = 1): an event on its first attempt since its
-- receipt or replay (the first search, by the index of fresh events) before any other due
-- event (the second search, only when the first found nothing: `coalesce` evaluates its
-- arguments in turn), each in the order of receipt. The key's check is two searches of an
-- index, each stopping at its first entry: the key's unfinished events received before the
-- candidate (`idx_webhook_ordering`; the row of the one it finds is read), and the key's events
-- in flight under a live lease (`idx_webhook_key_leases`, which holds the lease's end: no row
-- read). However many events of the key wait, the check reads at most one row.
--
-- SQLite runs one writer at a time: no two takes take one event, and receipts and replays
-- number the events in the order they commit. SQLite evaluates every SET expression on the
-- row as it was.
-- Binds: ?1 the worker's claim token, ?2 the lease in µs, ?3 1 to take new events first (0:
-- every due event in the order of receipt).
-- Answers the taken event (id, type, body, headers, path, received and budget start in Unix
-- milliseconds, this attempt's number, ordering key), or no row when nothing is due.
UPDATE {table}
SET state = 'in_flight',
    claim_token = ?1,
    due_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + ?2 / 1000,
    attempts = attempts + 1,
    last_error = CASE WHEN state = 'in_flight' THEN 'the lease ran out' ELSE last_error END,
    history = CASE
        WHEN state = 'in_flight' THEN substr(
            COALESCE(history, '') || strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            || ' attempt ' || attempts || ': the lease ran out' || char(10), -8192)
        ELSE history
    END
WHERE event_id = coalesce(
    (SELECT c.event_id FROM {table} AS c
     WHERE ?3 = 1 AND c.state = 'received' AND c.attempts = 0
       AND c.due_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
       AND (c.ordering_key IS NULL
            OR (NOT EXISTS (SELECT 1 FROM {table} AS k
                            WHERE k.ordering_key = c.ordering_key
                              AND k.state IN ('received', 'in_flight')
                              AND k.sequence < c.sequence)
                AND NOT EXISTS (SELECT 1 FROM {table} AS k
                                WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                                  AND k.due_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))))
     ORDER BY c.sequence
     LIMIT 1),
    (SELECT c.event_id FROM {table} AS c
     WHERE c.state IN ('received', 'in_flight') AND c.received_at IS NOT NULL
       AND c.due_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
       AND (c.ordering_key IS NULL
            OR (NOT EXISTS (SELECT 1 FROM {table} AS k
                            WHERE k.ordering_key = c.ordering_key
                              AND k.state IN ('received', 'in_flight')
                              AND k.sequence < c.sequence)
                AND NOT EXISTS (SELECT 1 FROM {table} AS k
                                WHERE k.ordering_key = c.ordering_key AND k.state = 'in_flight'
                                  AND k.due_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))))
     ORDER BY c.sequence
     LIMIT 1))
RETURNING event_id, event_type, body, headers, request_path, received_at,
          COALESCE(replayed_at, received_at), attempts, ordering_key;
