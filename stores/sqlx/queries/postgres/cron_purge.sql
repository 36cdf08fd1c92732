-- One batch of the purge as plain SQL for cron: repeat it until it deletes nothing. The same
-- answer from a session in any time zone (`expires_at` is a point in time).
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE expires_at <= now()
    LIMIT 1000 FOR UPDATE SKIP LOCKED);
