-- The session of each connection `PostgresStore::connect` opens: READ COMMITTED, the isolation
-- level the statements are written for (concurrent claims wait for each other instead of
-- failing), whatever the database's or the role's `default_transaction_isolation`.
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED;
