-- One purge batch of the rows without an expiry (written by another tool) claimed more than the
-- retention ago, as purge_expired.sql.
-- Binds (the DELETE): the retention in µs, the batch size.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET STATEMENT max_statement_time = 10, innodb_lock_wait_timeout = 1, lock_wait_timeout = 1 FOR
DELETE FROM {table}
WHERE expires_at IS NULL AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT ?;
