-- One purge batch of the rows past their own expiry. SQLite runs one writer at a time: a short
-- write transaction, which claims wait for through their busy timeout.
-- Binds: ?1 the batch size (?2, the retention, is unused).
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table} WHERE expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) LIMIT ?1);
