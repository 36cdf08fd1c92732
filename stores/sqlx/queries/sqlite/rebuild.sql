-- Rebuilds a table whose state check lacks inbox mode's states (a table of the store's
-- previous release, or one it adopted), or that keeps its rows by event id (`WITHOUT ROWID`, as
-- earlier releases created it), inside `migrate`'s write transaction: SQLite cannot alter a
-- check or a table's layout, so the table is created anew (as in `migrations/sqlite.sql`), its
-- rows copied, the old table dropped and the new one renamed (SQLite's documented procedure for
-- changes ALTER TABLE cannot make). Every column is there already (`add_columns.sql` ran
-- first); `migrate` creates the table's indexes and triggers again afterwards.
CREATE TABLE {table}_rebuild (
    event_id     VARCHAR(50)  NOT NULL PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at TIMESTAMP    DEFAULT CURRENT_TIMESTAMP,
    state        VARCHAR(9)   NOT NULL DEFAULT 'completed'
        CHECK (state IN ('received', 'in_flight', 'completed', 'dead')),
    claim_token  VARCHAR(32),
    expires_at   INTEGER,
    received_at  INTEGER,
    replayed_at  INTEGER,
    sequence     INTEGER,
    body         BLOB,
    headers      TEXT,
    request_path TEXT,
    due_at       INTEGER,
    attempts     INTEGER      NOT NULL DEFAULT 0,
    replays      INTEGER      NOT NULL DEFAULT 0,
    last_error   TEXT,
    history      TEXT,
    ordering_key VARCHAR(200)
);
INSERT INTO {table}_rebuild (event_id, event_type, processed_at, state, claim_token,
                             expires_at, received_at, replayed_at, sequence, body, headers,
                             request_path, due_at, attempts, replays, last_error, history,
                             ordering_key)
SELECT event_id, event_type, processed_at, state, claim_token, expires_at, received_at,
       replayed_at, sequence, body, headers, request_path, due_at, attempts, replays,
       last_error, history, ordering_key
FROM {table};
DROP TABLE {table};
ALTER TABLE {table}_rebuild RENAME TO {table};
