-- Begins a transaction with SQLite's write lock, taken before it reads: the migration's, and each
-- group commit's (a group's statements then never wait for the lock between them). One writer at
-- a time.
BEGIN IMMEDIATE;
