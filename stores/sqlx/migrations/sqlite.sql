-- sangho-webhook-sqlx: the SQLite schema of `SqliteStore` (table `processed_webhook_events`).
--
-- Safe to run again. The columns of the provider's documented schema (event_id, event_type,
-- processed_at) come first, with the same types.
--
-- processed_at when the event was last claimed (the delivery that processed it arrived), UTC
--              text 'YYYY-MM-DD HH:MM:SS.SSS' (CURRENT_TIMESTAMP's format, with milliseconds).
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed); inbox mode
--              adds two more (below).
-- claim_token  the owner of the record (32 hex characters); renew, complete and release check
--              it; a completed row keeps it, so that a repeated completion succeeds.
-- expires_at   Unix time in milliseconds (UTC by construction). In flight: when the lease ends
--              (then the next delivery takes the event over); completed: when the retention
--              ends (then the event is forgotten, and the purge deletes the row). NULL (a row
--              written by another tool): completed, until the purge removes it by
--              processed_at. NULL on an inbox event until it is completed.
--
-- Inbox mode's columns (NULL, or 0, on the rows of the direct mode; `received_at` tells the
-- two apart). An inbox event keeps `processed_at` and `expires_at` NULL until it is completed,
-- so that no purge by expiry (this store's, or cron's) and no `DELETE … WHERE processed_at <
-- …` ever deletes a waiting, in-flight or dead event. Times are Unix milliseconds, as
-- `expires_at`.
--
-- state        also 'received' (waiting for a worker, or for its next attempt) and 'dead'.
-- received_at  when the receipt stored the event.
-- replayed_at  when an operator last replayed it (the attempt budget starts again there).
-- sequence     the order of receipt.
-- body         the raw signed body, byte for byte.
-- headers      the stored headers: a JSON array of [name, value] pairs.
-- request_path the path the event was received on.
-- due_at       waiting: when its next attempt is due; in flight: when the worker's lease ends
--              (then another worker takes it over).
-- attempts     the attempts since the receipt or the last replay.
-- replays      how many times an operator replayed it.
-- last_error   the last failed attempt's excerpt of the status or error.
-- history      every failed attempt, lost lease and replay, one line each with its time (the
--              last 8 KiB).
-- ordering_key the key of events processed one at a time in the order of receipt (NULL: none;
--              a key over 200 bytes is stored as `sha256:` and its hash).
--
-- Run `PRAGMA journal_mode = WAL;` once on the database file as well (`SqliteStore::migrate`
-- does): readers then never wait for the writer.
--
-- The table keeps its rows in the order they were written (a rowid table, the event id in an
-- index of its own): a group of receipts or claims appends its rows to the last pages, and an
-- inbox event's 2 KiB body stays in its row's page. Keyed by the event id instead (`WITHOUT
-- ROWID`, as earlier releases created it), each new row went to a page of its own at a random
-- place, and a body over about 1 000 bytes to an overflow page besides: a group of 32 receipts
-- wrote twice the pages before its flush.

CREATE TABLE IF NOT EXISTS processed_webhook_events (
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

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);

-- Each index below holds only the rows of the mode that reads it. A row the index's statements
-- never look for would still be an entry (a NULL key too, placed by its event id), and every
-- write of it would change a page of that index: today's claims and completions stay out of
-- inbox mode's indexes, and waiting inbox events (no expiry yet) out of the purge's.

-- The purge deletes by each row's own expiry.
CREATE INDEX IF NOT EXISTS idx_webhook_expiry
    ON processed_webhook_events (expires_at) WHERE expires_at IS NOT NULL;

-- Inbox mode's take reads the unfinished events in the order of receipt.
CREATE INDEX IF NOT EXISTS idx_webhook_inbox_unfinished
    ON processed_webhook_events (sequence)
    WHERE state IN ('received', 'in_flight') AND received_at IS NOT NULL;

-- The receipt numbers each event one above the highest sequence: an index lookup, not a scan.
CREATE INDEX IF NOT EXISTS idx_webhook_inbox_sequence
    ON processed_webhook_events (sequence) WHERE sequence IS NOT NULL;

-- The three indexes above replace these, which held every row (tables of earlier releases).
DROP INDEX IF EXISTS idx_webhook_expires_at;
DROP INDEX IF EXISTS idx_webhook_unfinished;
DROP INDEX IF EXISTS idx_webhook_sequence;

-- The events waiting for their first attempt, which the take hands out before retries.
CREATE INDEX IF NOT EXISTS idx_webhook_fresh
    ON processed_webhook_events (sequence) WHERE state = 'received' AND attempts = 0;

-- The unfinished events of each ordering key, which hold back the key's later ones.
CREATE INDEX IF NOT EXISTS idx_webhook_ordering
    ON processed_webhook_events (ordering_key, sequence)
    WHERE state IN ('received', 'in_flight') AND ordering_key IS NOT NULL;

-- The events of each ordering key in flight, by the end of their lease: whether one runs under
-- a live lease (and holds its key) is read from this index alone. It holds no more rows than
-- handlers run.
CREATE INDEX IF NOT EXISTS idx_webhook_key_leases
    ON processed_webhook_events (ordering_key, due_at)
    WHERE state = 'in_flight' AND ordering_key IS NOT NULL;

-- The waiting, in-flight and dead inbox events: the operators' gauges count them from this
-- index alone, never reading the completed events.
CREATE INDEX IF NOT EXISTS idx_webhook_gauges
    ON processed_webhook_events (state, received_at, due_at)
    WHERE state IN ('received', 'in_flight', 'dead') AND received_at IS NOT NULL;

-- A table of the provider's documented schema (event_id, event_type, processed_at) is
-- upgraded by `SqliteStore::migrate`; by hand, run the statements below once instead of the
-- CREATE TABLE above (SQLite has no ADD COLUMN IF NOT EXISTS). The rows already there count as
-- completed events until their processed_at (or the time of the upgrade) plus the retention
-- (72 hours here).
--
-- ALTER TABLE processed_webhook_events ADD COLUMN state VARCHAR(9) NOT NULL DEFAULT 'completed'
--     CHECK (state IN ('received', 'in_flight', 'completed', 'dead'));
-- ALTER TABLE processed_webhook_events ADD COLUMN claim_token VARCHAR(32);
-- ALTER TABLE processed_webhook_events ADD COLUMN expires_at INTEGER;
-- ALTER TABLE processed_webhook_events ADD COLUMN received_at INTEGER;
-- ALTER TABLE processed_webhook_events ADD COLUMN replayed_at INTEGER;
-- ALTER TABLE processed_webhook_events ADD COLUMN sequence INTEGER;
-- ALTER TABLE processed_webhook_events ADD COLUMN body BLOB;
-- ALTER TABLE processed_webhook_events ADD COLUMN headers TEXT;
-- ALTER TABLE processed_webhook_events ADD COLUMN request_path TEXT;
-- ALTER TABLE processed_webhook_events ADD COLUMN due_at INTEGER;
-- ALTER TABLE processed_webhook_events ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
-- ALTER TABLE processed_webhook_events ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
-- ALTER TABLE processed_webhook_events ADD COLUMN last_error TEXT;
-- ALTER TABLE processed_webhook_events ADD COLUMN history TEXT;
-- ALTER TABLE processed_webhook_events ADD COLUMN ordering_key VARCHAR(200);
-- UPDATE processed_webhook_events
-- SET expires_at = CAST(round((julianday(COALESCE(processed_at, 'now')) - 2440587.5)
--                             * 86400000.0) AS INTEGER) + 72 * 3600 * 1000
-- WHERE expires_at IS NULL AND received_at IS NULL;
--
-- A table of the store's previous release (its state check allows only 'in_flight' and
-- 'completed'; so does a table of the provider's schema that it adopted) is rebuilt by
-- `SqliteStore::migrate`: SQLite cannot alter a check. So is a table created `WITHOUT ROWID`
-- (by an earlier release): SQLite cannot change a table's layout either. By hand, in one
-- transaction (it holds the database's write lock throughout: receipts and claims wait, up to
-- their busy timeout), add the inbox columns above that are missing (received_at to
-- ordering_key), then:
--
-- BEGIN IMMEDIATE;
-- CREATE TABLE processed_webhook_events_rebuild (…the columns of the CREATE TABLE above…);
-- INSERT INTO processed_webhook_events_rebuild SELECT event_id, event_type, processed_at,
--     state, claim_token, expires_at, received_at, replayed_at, sequence, body, headers,
--     request_path, due_at, attempts, replays, last_error, history, ordering_key
--     FROM processed_webhook_events;
-- DROP TABLE processed_webhook_events;
-- ALTER TABLE processed_webhook_events_rebuild RENAME TO processed_webhook_events;
-- …then this script's CREATE INDEX statements (and any index or trigger of your own)…
-- COMMIT;
