-- Drops inbox mode's index of unfinished events when `index_state.sql` found it invalid, so
-- that `migrate` builds it again. Named for the default table; `migrate` renames it for the
-- store's table as it does the migration script.
DROP INDEX CONCURRENTLY IF EXISTS idx_webhook_unfinished;
