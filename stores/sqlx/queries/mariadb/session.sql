-- The session of each connection `MariaDbStore::connect` opens: READ COMMITTED (InnoDB's
-- default, REPEATABLE READ, takes gap locks that make concurrent claims deadlock more often),
-- and the time zone UTC, so that a TIMESTAMP column (the `processed_at` of an adopted table)
-- reads and writes UTC, like the store's own DATETIME columns.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET time_zone = '+00:00';
