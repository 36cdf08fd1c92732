-- The settings of the migration script's run, in the migration's transaction: the "already
-- exists, skipping" notices, the normal case, stay out of the server's logs. (The script sets
-- its own lock timeout, for its `ALTER TABLE`.)
SET LOCAL client_min_messages = warning;
