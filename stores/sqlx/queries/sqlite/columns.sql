-- The columns of a table, for `migrate`.
-- Binds: ?1 the table name.
-- Answers one row per column, its name in lower case; no row when there is no such table.
SELECT lower(name) FROM pragma_table_info(?1);
