-- One purge batch of the rows without an expiry (written by another tool) claimed more than
-- the retention ago.
-- Binds: ?1 the batch size, ?2 the retention as a date modifier such as
-- '-259200.000000 seconds'.
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE expires_at IS NULL AND processed_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?2)
    LIMIT ?1);
