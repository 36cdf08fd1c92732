-- Renew a delivery's claim, in one statement: extend the token's live claim, or record it again
-- when the event has no live record. A live completion by the token is rewritten unchanged.
-- SQLite evaluates every SET expression on the row as it was.
-- Binds: ?1 event id, ?2 event type, ?3 the delivery's claim token, ?4 the lease in µs.
-- Answers the row's `claim_token` when the row is now the token's; no row when another
-- owner's live record was left alone.
INSERT INTO {table} AS e (event_id, event_type, processed_at, state, claim_token, expires_at)
VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now'), 'in_flight', ?3,
        CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + ?4 / 1000)
ON CONFLICT (event_id) DO UPDATE SET
    event_type = CASE WHEN e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                      THEN excluded.event_type ELSE e.event_type END,
    processed_at = CASE WHEN e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                        THEN excluded.processed_at ELSE e.processed_at END,
    state = CASE WHEN e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                 THEN 'in_flight' ELSE e.state END,
    claim_token = excluded.claim_token,
    expires_at = CASE WHEN e.state = 'completed'
                           AND e.expires_at > CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
                      THEN e.expires_at ELSE excluded.expires_at END
WHERE e.claim_token = ?3 OR e.expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
RETURNING claim_token;
