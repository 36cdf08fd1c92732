-- Whether the store's table is up to date besides its columns, for `migrate`: how many of its
-- six indexes exist, plus 1 for inbox mode's receipt sequence, plus 1 when the state's check
-- allows inbox mode's states (8: up to date).
-- Binds: the table name, the `processed_at` index name, the `expires_at` index name, inbox
-- mode's four index names (the queue, the lease ends, the new events, the key order); the
-- sequence's name; the table name.
SELECT (SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics
        WHERE table_schema = DATABASE() AND table_name = ? AND index_name IN (?, ?, ?, ?, ?, ?))
     + (SELECT COUNT(*) FROM information_schema.tables
        WHERE table_schema = DATABASE() AND table_name = ? AND table_type = 'SEQUENCE')
     + (SELECT COUNT(*) FROM information_schema.check_constraints
        WHERE constraint_schema = DATABASE() AND table_name = ?
          AND check_clause LIKE '%received%' AND check_clause LIKE '%dead%');
