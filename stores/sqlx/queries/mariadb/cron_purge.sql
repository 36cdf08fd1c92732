-- One batch of the purge as plain SQL for cron: repeat it until it deletes nothing. The same
-- answer from a session in any time zone (UTC_TIMESTAMP).
DELETE FROM {table} WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT 1000;
