-- sangho-webhook-sqlx: the MariaDB schema of `MariaDbStore` (table `processed_webhook_events`).
-- MariaDB 10.6 or later (the statements use INSERT … RETURNING, which MySQL lacks, and inbox
-- mode's take SELECT … FOR UPDATE SKIP LOCKED).
--
-- Safe to run again, and on a table created with the provider's documented schema (event_id,
-- event_type, processed_at): it keeps those columns as they are and only adds what is missing.
-- Rows already in such a table count as completed events until their processed_at (or, without
-- one, the time of the upgrade) plus the retention (72 hours here; `MariaDbStore::migrate`
-- uses the store's adopted retention). Run it in a session whose time_zone is '+00:00' (as
-- `MariaDbStore::migrate` does), so that a TIMESTAMP processed_at reads as UTC.
--
-- Each ALTER TABLE and CREATE INDEX needs the table's exclusive metadata lock for a moment, and
-- waits for every transaction that holds the table to end; every statement on the table that
-- arrives meanwhile (every claim) queues behind it. So each waits briefly, then fails and lets
-- the queued statements go on: the instant ALTER TABLEs give up after 0.5 s
-- (max_statement_time, error 1969), the others after 1 s (lock_wait_timeout, which MariaDB
-- counts in whole seconds, error 1205). `MariaDbStore::migrate` runs such a statement again
-- after a pause of 1 s, for 10 s at most; by hand, run the script again.
--
-- event_id     ASCII, compared byte for byte: event ids are case-sensitive. (An adopted
--              table keeps its own collation; with a case-insensitive one, two ids that
--              differ only in case count as one event.)
-- processed_at when the event was last claimed (the delivery that processed it arrived).
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the record (32 hex characters); renew, complete and release check
--              it; a completed row keeps it, so that a repeated completion succeeds.
-- expires_at   UTC (UTC_TIMESTAMP) by construction, whatever the server's time zone. In
--              flight: when the lease ends (then the next delivery takes the event over);
--              completed: when the retention ends (then the event is forgotten, and the purge
--              deletes the row). NULL (a row written by another tool): completed, until the
--              purge removes it by processed_at. NULL on an inbox event until it is completed.
--
-- Inbox mode's columns (NULL, or 0, on the rows of the direct mode; `received_at` tells the
-- two apart). An inbox event keeps `processed_at` and `expires_at` NULL until it is completed,
-- so that no purge by expiry (this store's, or cron's) and no `DELETE … WHERE processed_at <
-- …` ever deletes a waiting, in-flight or dead event. Times are UTC, as `expires_at`.
--
-- state        also 'received' (waiting for a worker, or for its next attempt) and 'dead'.
-- received_at  when the receipt stored the event.
-- replayed_at  when an operator last replayed it (the attempt budget starts again there).
-- sequence     the order of receipt (NEXTVAL of the sequence
--              processed_webhook_events_sequence).
-- body         the raw signed body, byte for byte.
-- headers      the stored headers: a JSON array of [name, value] pairs.
-- request_path the path the event was received on.
-- due_at       waiting: when its next attempt is due; in flight: when the worker's lease ends
--              (then another worker takes it over).
-- attempts     the attempts since the receipt or the last replay.
-- replays      how many times an operator replayed it.
-- last_error   the last failed attempt's excerpt of the status or error.
-- history      every failed attempt, lost lease and replay, one line each with its time (the
--              last 8192 characters).
-- ordering_key the key of events processed one at a time in the order of receipt (NULL: none;
--              a key over 200 bytes is stored as `sha256:` and its hash), compared byte for
--              byte.
-- inbox_state  the state of an inbox event, NULL on a row of the direct mode (generated from
--              `received_at` and `state`, never stored). Inbox mode's indexes begin with it, so
--              that an event of the direct mode has one entry in each, written by its claim,
--              that its completion leaves where it is: MariaDB has no partial indexes.

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at DATETIME(6)  DEFAULT (UTC_TIMESTAMP(6)),
    state        VARCHAR(9)   CHARACTER SET ascii NOT NULL DEFAULT 'completed'
        CHECK (state IN ('received', 'in_flight', 'completed', 'dead')),
    claim_token  CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin,
    expires_at   DATETIME(6),
    received_at  DATETIME(6),
    replayed_at  DATETIME(6),
    sequence     BIGINT,
    body         LONGBLOB,
    headers      TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    request_path TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    due_at       DATETIME(6),
    attempts     INT          NOT NULL DEFAULT 0,
    replays      INT          NOT NULL DEFAULT 0,
    last_error   TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    history      TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    ordering_key VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    inbox_state  VARCHAR(9)   CHARACTER SET ascii
        AS (IF(received_at IS NULL, NULL, state)) VIRTUAL
) ENGINE = InnoDB;

-- A table of the provider's documented schema: add the store's columns, and give the rows
-- already there their retention.
SET STATEMENT lock_wait_timeout = 1 FOR
ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS processed_at DATETIME(6) DEFAULT (UTC_TIMESTAMP(6)),
    ADD COLUMN IF NOT EXISTS state VARCHAR(9) CHARACTER SET ascii NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    ADD COLUMN IF NOT EXISTS claim_token CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
    ADD COLUMN IF NOT EXISTS expires_at DATETIME(6);

-- A table of the store's previous release (or of inbox mode before ordering keys): add inbox
-- mode's columns, a change of the data
-- dictionary only (ALGORITHM=INSTANT: no copy or rebuild of the table), and let the state
-- column hold inbox mode's states (its CHECK replaced, instantly too: the rows already there
-- hold the old states, which the new check allows).
SET STATEMENT max_statement_time = 0.5 FOR
ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS received_at DATETIME(6),
    ADD COLUMN IF NOT EXISTS replayed_at DATETIME(6),
    ADD COLUMN IF NOT EXISTS sequence BIGINT,
    ADD COLUMN IF NOT EXISTS body LONGBLOB,
    ADD COLUMN IF NOT EXISTS headers TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    ADD COLUMN IF NOT EXISTS request_path TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    ADD COLUMN IF NOT EXISTS due_at DATETIME(6),
    ADD COLUMN IF NOT EXISTS attempts INT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS replays INT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_error TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    ADD COLUMN IF NOT EXISTS history TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    ADD COLUMN IF NOT EXISTS ordering_key VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    ALGORITHM = INSTANT;

-- A table of an earlier release of inbox mode, whose indexes began with `state`: add the
-- generated state of inbox events, a change of the data dictionary only (a virtual column is
-- computed as it is read, never stored).
SET STATEMENT max_statement_time = 0.5 FOR
ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS inbox_state VARCHAR(9) CHARACTER SET ascii
        AS (IF(received_at IS NULL, NULL, state)) VIRTUAL,
    ALGORITHM = INSTANT;

SET STATEMENT max_statement_time = 0.5 FOR
ALTER TABLE processed_webhook_events
    MODIFY state VARCHAR(9) CHARACTER SET ascii NOT NULL DEFAULT 'completed'
        CHECK (state IN ('received', 'in_flight', 'completed', 'dead')),
    ALGORITHM = INSTANT;

CREATE SEQUENCE IF NOT EXISTS processed_webhook_events_sequence;

-- The rows of a table of the provider's documented schema count as completed events (never
-- an inbox event, which keeps its expiry NULL until it is completed).
UPDATE processed_webhook_events
SET expires_at = COALESCE(processed_at, UTC_TIMESTAMP(6)) + INTERVAL 72 HOUR
WHERE expires_at IS NULL AND received_at IS NULL;

SET STATEMENT lock_wait_timeout = 1 FOR
CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);

-- The purge deletes by each row's own expiry.
SET STATEMENT lock_wait_timeout = 1 FOR
CREATE INDEX IF NOT EXISTS idx_webhook_expires_at
    ON processed_webhook_events (expires_at);

-- Inbox mode's indexes begin with `inbox_state` (NULL on a row of the direct mode), and each
-- is built in place (ALGORITHM=INPLACE, LOCK=NONE: receipts and claims go on meanwhile; the
-- exclusive metadata lock only at its start and at its end).
--
-- The take reads the unfinished events in the order of receipt.
SET STATEMENT lock_wait_timeout = 1 FOR
CREATE INDEX IF NOT EXISTS idx_webhook_queue
    ON processed_webhook_events (inbox_state, sequence) ALGORITHM = INPLACE LOCK = NONE;

-- The take looks for an event whose lease ran out by the state and the lease's end, so that it
-- reads only those, not every event in flight (nor the entries of the completed ones that
-- InnoDB has yet to purge). The gauges count each state from it.
SET STATEMENT lock_wait_timeout = 1 FOR
CREATE INDEX IF NOT EXISTS idx_webhook_lease_ends
    ON processed_webhook_events (inbox_state, due_at) ALGORITHM = INPLACE LOCK = NONE;

-- The take looks first for the events waiting for their first attempt, in the order of
-- receipt, so that it never reads the retries among them.
SET STATEMENT lock_wait_timeout = 1 FOR
CREATE INDEX IF NOT EXISTS idx_webhook_new_events
    ON processed_webhook_events (inbox_state, attempts, sequence) ALGORITHM = INPLACE LOCK = NONE;

-- The take hands out an event with an ordering key only while no unfinished event of its key
-- was received before it and none is in flight: it looks them up by key and state, in the
-- order of receipt.
SET STATEMENT lock_wait_timeout = 1 FOR
CREATE INDEX IF NOT EXISTS idx_webhook_key_order
    ON processed_webhook_events (ordering_key, inbox_state, sequence)
    ALGORITHM = INPLACE LOCK = NONE;

-- An earlier release of inbox mode keyed the same four indexes on `state`
-- (`idx_webhook_unfinished`, `idx_webhook_leases`, `idx_webhook_fresh`,
-- `idx_webhook_ordering`), so that every event of the direct mode had an entry in each that its
-- completion moved. Its instances name them in their statements, so this script keeps them.
-- Once no instance of that release serves, drop them by hand (each needs the exclusive metadata
-- lock for a moment); until then every completion of the direct mode moves its event in them:
--
--   DROP INDEX IF EXISTS idx_webhook_unfinished ON processed_webhook_events;
--   DROP INDEX IF EXISTS idx_webhook_leases ON processed_webhook_events;
--   DROP INDEX IF EXISTS idx_webhook_fresh ON processed_webhook_events;
--   DROP INDEX IF EXISTS idx_webhook_ordering ON processed_webhook_events;
