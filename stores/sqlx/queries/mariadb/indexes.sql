-- How many of the two indexes of the store's table exist, for `migrate`.
-- Binds: the table name, the `processed_at` index name, the `expires_at` index name.
SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = ? AND index_name IN (?, ?);
