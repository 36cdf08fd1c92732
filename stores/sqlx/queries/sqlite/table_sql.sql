-- The statement a table was created with (as ALTER TABLE left it), for `migrate`: a table
-- whose state check lacks 'received' is rebuilt (`rebuild.sql`).
-- Binds: ?1 the table name.
-- Answers one row; no row when there is no such table.
SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1;
