-- Serialises the concurrent index builds of several replicas' migrations, for the session:
-- tried, never waited for inside a statement (a `CREATE INDEX CONCURRENTLY` waits for every
-- statement that holds a snapshot, so a replica waiting here in a statement would deadlock
-- with the one building). `migrate` tries again every 100 ms, for 30 s at most.
-- Answers whether the lock is now the session's.
SELECT pg_try_advisory_lock(7310575268310339690);
