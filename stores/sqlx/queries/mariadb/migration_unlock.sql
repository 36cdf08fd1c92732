-- Ends migration_lock.sql.
-- Binds: the table name.
SELECT RELEASE_LOCK(CONCAT('sangho_migrate_', ?));
