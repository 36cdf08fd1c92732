-- Drops one of inbox mode's indexes when `index_state.sql` found it invalid, so that `migrate`
-- builds it again.
-- Placeholder: {index} the index's name.
DROP INDEX CONCURRENTLY IF EXISTS {index};
