-- Switches the database file to WAL mode (readers never wait for the writer): persistent in the
-- file, a no-op when it is WAL already, "memory" for `:memory:`.
PRAGMA journal_mode = WAL;
