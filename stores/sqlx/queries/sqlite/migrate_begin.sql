-- Begins the migration's transaction with SQLite's write lock, taken before it reads the table:
-- one writer at a time.
BEGIN IMMEDIATE;
