-- Serialises concurrent migrations (several replicas starting at once: `CREATE TABLE IF NOT
-- EXISTS` alone can fail when two sessions race), in the migration's transaction. Waits at
-- most 30 s for another replica's migration, then fails with SQLSTATE 55P03.
SET LOCAL lock_timeout = '30000ms';
SELECT pg_advisory_xact_lock(7310575268310339689);
