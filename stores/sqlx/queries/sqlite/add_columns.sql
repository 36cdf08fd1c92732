-- The columns `migrate` adds to a table of the provider's documented schema, each only when it
-- is missing (SQLite adds a column only with a constant default).
ALTER TABLE {table} ADD COLUMN processed_at TIMESTAMP;
ALTER TABLE {table} ADD COLUMN state VARCHAR(9) NOT NULL DEFAULT 'completed' CHECK (state IN ('in_flight', 'completed'));
ALTER TABLE {table} ADD COLUMN claim_token VARCHAR(32);
ALTER TABLE {table} ADD COLUMN expires_at INTEGER;
