-- Whether the store's table is up to date besides its columns, for `migrate`.
-- Binds: $1 the `processed_at` index name, $2 the `expires_at` index name, $3 the receipt
-- sequence name, $4 the table name, $5, $6, $7 and $8 the unfinished, fresh, ordering and
-- dead events' indexes' names.
-- Answers two booleans: whether the two indexes, the sequence and a state check that allows
-- inbox mode's states exist (the part of the migration run in a transaction); whether inbox
-- mode's four indexes exist and are valid (the part built concurrently: a `CREATE INDEX
-- CONCURRENTLY` that failed, or is still running, leaves an invalid one).
SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
       AND to_regclass($3) IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = to_regclass($4) AND contype = 'c'
                     AND pg_get_constraintdef(oid) LIKE '%received%'),
       (SELECT count(*) = 4 FROM pg_index
        WHERE indexrelid IN (to_regclass($5), to_regclass($6), to_regclass($7), to_regclass($8))
          AND indisvalid);
