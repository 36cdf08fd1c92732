-- Inbox mode: store a verified event if its id is new, in one statement. Every connection of
-- `SqliteStore::connect_options` commits with `synchronous = FULL`: the receipt answers 2xx
-- only once the row is flushed to disk (a pool of your own with NORMAL or OFF loses the last
-- acknowledged receipts on a power loss). `now` is Unix time in milliseconds, the same for the
-- whole statement; SQLite runs one writer at a time, so `MAX(sequence) + 1` is the next
-- number of receipt, and receipts commit in the order of their numbers (a take never sees a
-- key's later receipt without its earlier one).
-- Binds: ?1 event id, ?2 event type, ?3 the raw body, ?4 the stored headers (a JSON array of
-- [name, value] pairs), ?5 the path it was received on, ?6 the ordering key or NULL.
-- Answers one row with `status` 'stored' (new, or a record whose expiry had passed, taken
-- over); no row when a live record is in the way (an inbox event, a live completion or a live
-- claim of the direct mode): then the store reads `inbox_state.sql`, which tells a
-- direct-mode claim ('claimed') from a duplicate.
--
-- The row is written with `expires_at` and `processed_at` NULL until it is completed: neither
-- the purge by expiry nor the provider's documented `DELETE … WHERE processed_at < …` ever
-- matches a waiting, in-flight or dead event.
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at,
                          received_at, replayed_at, sequence, body, headers, request_path,
                          due_at, attempts, replays, last_error, history, ordering_key)
VALUES (?1, ?2, NULL, 'received', NULL, NULL,
        CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), NULL,
        (SELECT COALESCE(MAX(sequence), 0) + 1 FROM {table} WHERE sequence IS NOT NULL), ?3, ?4, ?5,
        CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 0, 0, NULL, NULL,
        ?6)
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
RETURNING 'stored' AS status;
