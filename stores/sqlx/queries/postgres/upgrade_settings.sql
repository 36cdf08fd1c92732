-- The settings of the migration script's run, in the migration's transaction: `ALTER TABLE`
-- needs an exclusive lock, and every claim that arrives while it waits queues behind it, so it
-- waits at most 2 s; and the "already exists, skipping" notices, the normal case, stay out of
-- the server's logs.
SET LOCAL lock_timeout = '2s';
SET LOCAL client_min_messages = warning;
