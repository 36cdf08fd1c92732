-- The columns of a table, for `migrate`.
-- Binds: $1 the table name.
-- Answers one row per column, its name; no row when there is no such table.
SELECT attname::text FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped;
