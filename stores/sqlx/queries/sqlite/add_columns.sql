-- The columns `migrate` adds to a table of the provider's documented schema or of the store's
-- previous release, each only when it is missing (SQLite adds a column only with a constant
-- default). A `state` column added with the older check (of the previous release) is replaced
-- by rebuilding the table (`rebuild.sql`): SQLite cannot alter a check.
ALTER TABLE {table} ADD COLUMN processed_at TIMESTAMP;
ALTER TABLE {table} ADD COLUMN state VARCHAR(9) NOT NULL DEFAULT 'completed' CHECK (state IN ('received', 'in_flight', 'completed', 'dead'));
ALTER TABLE {table} ADD COLUMN claim_token VARCHAR(32);
ALTER TABLE {table} ADD COLUMN expires_at INTEGER;
ALTER TABLE {table} ADD COLUMN received_at INTEGER;
ALTER TABLE {table} ADD COLUMN replayed_at INTEGER;
ALTER TABLE {table} ADD COLUMN sequence INTEGER;
ALTER TABLE {table} ADD COLUMN body BLOB;
ALTER TABLE {table} ADD COLUMN headers TEXT;
ALTER TABLE {table} ADD COLUMN request_path TEXT;
ALTER TABLE {table} ADD COLUMN due_at INTEGER;
ALTER TABLE {table} ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {table} ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {table} ADD COLUMN last_error TEXT;
ALTER TABLE {table} ADD COLUMN history TEXT;
ALTER TABLE {table} ADD COLUMN ordering_key VARCHAR(200);
