-- The rows of an adopted table (without an expiry): completed until their `processed_at` (or
-- now) plus the adopted retention. Never an inbox event, which keeps its expiry NULL until it
-- is completed.
-- Binds: ?1 the adopted retention in µs.
UPDATE {table}
SET expires_at = CAST(round((julianday(COALESCE(processed_at, 'now')) - 2440587.5) * 86400000.0)
                      AS INTEGER) + ?1 / 1000
WHERE expires_at IS NULL AND received_at IS NULL;
