-- One batch of the purge, in a transaction of its own at READ COMMITTED under a statement and
-- a lock timeout: the rows past their own expiry, then the rows without one (written by another
-- tool) claimed more than the retention ago. `SKIP LOCKED`: a row a claim is taking over right
-- now is left for the next purge, so that no claim ever waits for the purge's row locks.
-- Binds (the last statement): $1 the batch size, $2 the retention in µs.
-- Answers how many rows it deleted.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCAL statement_timeout = '10s';
SET LOCAL lock_timeout = '1s';
WITH expired AS (
    DELETE FROM {table} WHERE event_id IN (
        SELECT event_id FROM {table}
        WHERE expires_at <= statement_timestamp()
        LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING 1
), unexpiring AS (
    DELETE FROM {table} WHERE event_id IN (
        SELECT event_id FROM {table}
        WHERE expires_at IS NULL
          AND processed_at < CAST(statement_timestamp() - $2 * INTERVAL '1 microsecond' AS TIMESTAMP)
        LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT (SELECT count(*) FROM expired) + (SELECT count(*) FROM unexpiring);
