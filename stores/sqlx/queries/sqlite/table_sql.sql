-- The statement a table was created with (as ALTER TABLE left it), and whether it keeps its
-- rows by primary key (`WITHOUT ROWID`, 1) rather than in the order written (0), for
-- `migrate`: a table whose state check lacks 'received', or that is `WITHOUT ROWID`, is
-- rebuilt (`rebuild.sql`).
-- Binds: ?1 the table name.
-- Answers one row; no row when there is no such table.
SELECT m.sql, t.wr
FROM sqlite_master AS m
JOIN pragma_table_list AS t ON t.schema = 'main' AND t.name = m.name
WHERE m.type = 'table' AND m.name = ?1;
