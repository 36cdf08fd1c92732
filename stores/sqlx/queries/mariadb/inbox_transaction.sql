-- Inbox mode: the isolation level of the next transaction, before each operation that runs
-- several statements in one (READ COMMITTED: a take's `SKIP LOCKED` passes over the rows
-- other takes hold, without the gap locks of REPEATABLE READ that would block receipts).
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
