-- One purge batch of the rows past their own expiry, in a transaction of its own at READ
-- COMMITTED, under a statement timeout (seconds) and short lock waits; InnoDB deletes through
-- the `expires_at` index.
-- Binds (the DELETE): the batch size.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET STATEMENT max_statement_time = 10, innodb_lock_wait_timeout = 1, lock_wait_timeout = 1 FOR
DELETE FROM {table} WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT ?;
