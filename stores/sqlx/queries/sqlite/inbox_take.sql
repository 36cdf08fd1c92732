-- Inbox mode: take the due event received first under a worker's lease, in one statement.
-- Due: waiting with its time come, or in flight with its lease run out (its worker crashed or
-- stalled; the lost attempt goes into the history). SQLite runs one writer at a time: no two
-- takes take one event. SQLite evaluates every SET expression on the row as it was.
-- Binds: ?1 the worker's claim token, ?2 the lease in µs.
-- Answers the taken event (id, type, body, headers, path, received and budget start in Unix
-- milliseconds, this attempt's number), or no row when nothing is due.
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
WHERE event_id = (
    SELECT event_id FROM {table}
    WHERE state IN ('received', 'in_flight') AND sequence IS NOT NULL
      AND due_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
    ORDER BY sequence
    LIMIT 1)
RETURNING event_id, event_type, body, headers, request_path, received_at,
          COALESCE(replayed_at, received_at), attempts;
