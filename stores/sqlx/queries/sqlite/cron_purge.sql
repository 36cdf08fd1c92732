-- One batch of the purge as plain SQL for cron: repeat it until it deletes nothing. The same
-- answer in any time zone (`expires_at` is Unix time).
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE expires_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
    LIMIT 1000);
