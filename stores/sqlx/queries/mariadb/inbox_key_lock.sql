-- Inbox mode: take the lock of an ordering key before a receipt or a replay gives an event of
-- that key its sequence number (`inbox_receive.sql`, `inbox_replay.sql`), on the connection that
-- runs it; `inbox_key_unlock.sql` releases it once that has committed, so that the receipts and
-- replays of one key commit in the order of their sequence numbers.
--
-- A named lock (GET_LOCK) rather than a row's: a key's first receipt has no row to lock, and at
-- READ COMMITTED InnoDB locks no gap. A named lock belongs to the session, not to the
-- transaction, so the store releases it itself, and closes a connection whose release did not
-- run (an error, a cancelled receipt) instead of returning it to the pool: its lock ends with
-- its session. Its name holds the database, the table and the key's SHA-1: keys of other tables
-- never share a lock (two keys whose hashes collide would only wait for each other). The lock
-- is taken before any row lock, as every statement that takes both does, so that it never
-- waits in a cycle with a row lock.
-- Binds: the receipt's ordering key, or NULL for a replay (the event's stored key is locked,
-- read without a lock), the event id, the longest wait in µs.
-- Answers 1 once the key is locked, or when there is no key to lock; 0 when the wait ran out;
-- NULL on an error. Keeps the key in `@sangho_key` (a replay changes the event only while it
-- has that key) and the lock's name in `@sangho_key_lock`, both NULL without a key.
SELECT IF((@sangho_key_lock := CONCAT('sangho_key_', SHA1(CONCAT(DATABASE(), CHAR(0), '{table}', CHAR(0),
              @sangho_key := CONVERT(COALESCE(?, (SELECT ordering_key FROM {table} WHERE event_id = ?))
                                     USING utf8mb4) COLLATE utf8mb4_bin)))) IS NULL,
          1, GET_LOCK(@sangho_key_lock, ? / 1000000));
