-- Whether both indexes of the store's table exist, for `migrate`.
-- Binds: $1 the `processed_at` index name, $2 the `expires_at` index name.
-- Answers one boolean.
SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL;
