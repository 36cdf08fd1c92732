-- The indexes and triggers of a table (the automatic ones aside), for `migrate` to create
-- again after it rebuilt the table.
-- Binds: ?1 the table name.
-- Answers one row per index or trigger: its statement.
SELECT sql FROM sqlite_master
WHERE tbl_name = ?1 AND type IN ('index', 'trigger') AND sql IS NOT NULL
ORDER BY type, name;
