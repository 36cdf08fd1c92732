-- The columns of a table, for `migrate`.
-- Binds: the table name.
-- Answers one row per column, its name in lower case; no row when there is no such table.
SELECT lower(column_name) FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ?;
