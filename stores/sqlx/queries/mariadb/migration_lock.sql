-- Serialises concurrent migrations (several replicas starting at once).
-- Binds: the table name, how long to wait in seconds.
-- Answers 1 once the lock is held, 0 after the wait, NULL on an error.
SELECT GET_LOCK(CONCAT('sangho_migrate_', ?), ?);
