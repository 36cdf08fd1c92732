-- The state of an index, for `migrate`: 'missing', 'invalid' (a `CREATE INDEX CONCURRENTLY`
-- that failed or was interrupted leaves one behind, which `migrate` drops before building it
-- again) or 'valid'.
-- Binds: $1 the index name.
-- Answers one text.
SELECT CASE
           WHEN to_regclass($1) IS NULL THEN 'missing'
           WHEN EXISTS (SELECT 1 FROM pg_index
                        WHERE indexrelid = to_regclass($1) AND NOT indisvalid) THEN 'invalid'
           ELSE 'valid'
       END;
