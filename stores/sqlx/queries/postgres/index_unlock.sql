-- Gives back the lock of `index_lock.sql`.
SELECT pg_advisory_unlock(7310575268310339690);
