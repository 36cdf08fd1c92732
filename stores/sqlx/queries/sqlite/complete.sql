-- Complete an event, in one statement: record it as completed by the token unless another
-- owner holds or completed it (a live record with another token). A live record of the token
-- keeps its `processed_at` (and so its index entry). The layer's completion and `complete_in`
-- (inside the handler's transaction) both run it.
-- Binds: ?1 event id, ?2 event type, ?3 the delivery's claim token, ?4 the retention in µs.
-- Answers the row's `claim_token` when the event is now completed by the token; no row when
-- another owner's live record was left alone. An inbox event its worker holds is completed
-- the same way (its `expires_at` is NULL until then, and `processed_at` is set now).
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'completed', ?3,
        CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + ?4 / 1000)
ON CONFLICT (event_id) DO UPDATE SET
    event_type = CASE WHEN e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                      THEN excluded.event_type ELSE e.event_type END,
    processed_at = CASE WHEN e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                        THEN excluded.processed_at
                        ELSE COALESCE(e.processed_at, excluded.processed_at) END,
    state = 'completed',
    claim_token = excluded.claim_token,
    expires_at = excluded.expires_at,
    due_at = NULL
WHERE e.claim_token = ?3 OR e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
RETURNING claim_token;
