-- Inbox mode: store many verified events at once (a group commit's receipts of distinct ids
-- and ordering keys), in one statement: each row as `inbox_receive.sql` stores its one event.
-- Each stored event's sequence number is above every number before the statement, in the
-- order of the rows (one writer at a time: receipts commit in the order of their numbers).
-- Binds: `{rows}` stands for the rows' values, `(?, ?, ?, ?, ?, ?)` each: event id, event
-- type, the raw body, the stored headers, the path it was received on, the ordering key or
-- NULL. A row of NULLs stores nothing.
-- Answers one row (`event_id`, `status` 'stored') for each event stored; no row for an event
-- a live record is in the way of: then the store reads `inbox_state.sql`.
WITH receipts (event_id, event_type, body, headers, request_path, ordering_key) AS (VALUES {rows}),
     numbered AS (SELECT receipts.*, row_number() OVER () AS position FROM receipts
                  WHERE event_id IS NOT NULL)
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at,
                          received_at, replayed_at, sequence, body, headers, request_path,
                          due_at, attempts, replays, last_error, history, ordering_key)
SELECT event_id, event_type, NULL, 'received', NULL, NULL,
       CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), NULL,
       (SELECT COALESCE(MAX(sequence), 0) FROM {table} WHERE sequence IS NOT NULL) + position, body, headers, request_path,
       CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 0, 0, NULL, NULL,
       ordering_key
FROM numbered
WHERE true
ORDER BY position
ON CONFLICT (event_id) DO UPDATE SET
    event_type = excluded.event_type,
    processed_at = NULL,
    state = 'received',
    claim_token = NULL,
    expires_at = NULL,
    received_at = excluded.received_at,
    replayed_at = NULL,
    sequence = excluded.sequence,
    body = excluded.body,
    headers = excluded.headers,
    request_path = excluded.request_path,
    due_at = excluded.due_at,
    attempts = 0,
    replays = 0,
    last_error = NULL,
    history = NULL,
    ordering_key = excluded.ordering_key
WHERE e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
RETURNING event_id, 'stored' AS status;
