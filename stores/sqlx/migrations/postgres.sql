-- sangho-webhook-sqlx: the PostgreSQL schema of `PostgresStore` (table `processed_webhook_events`).
--
-- Safe to run again, and on a table created with the provider's documented schema (event_id,
-- event_type, processed_at and the index idx_webhook_processed_at): it keeps those columns as
-- they are and only adds what is missing. Rows already in such a table count as completed
-- events until their processed_at (or, without one, the time of the upgrade) plus the
-- retention (72 hours here; `PostgresStore::migrate` uses the store's adopted retention).
-- Run the statements up to the line "Outside a transaction" in one transaction, and the last
-- one on its own (CREATE INDEX CONCURRENTLY cannot run in a transaction), as `migrate` does.
--
-- processed_at when the event was last claimed (the delivery that processed it arrived).
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the record (32 hex characters); renew, complete and release check
--              it; a completed row keeps it, so that a repeated completion succeeds.
-- expires_at   in flight: when the lease ends (then the next delivery takes the event over);
--              completed: when the retention ends (then the event is forgotten, and the purge
--              deletes the row). A point in time (timestamptz), the same in every session's
--              time zone. NULL (a row written later by another tool): completed, until the
--              purge removes it by processed_at. NULL on an inbox event until it is completed.
--
-- Inbox mode's columns (NULL, or 0, on the rows of the direct mode; `received_at` tells the
-- two apart). An inbox event keeps `processed_at` and `expires_at` NULL until it is completed,
-- so that no purge by expiry (this store's, or cron's) and no `DELETE … WHERE processed_at <
-- …` ever deletes a waiting, in-flight or dead event.
--
-- state        also 'received' (waiting for a worker, or for its next attempt) and 'dead'.
-- received_at  when the receipt stored the event.
-- replayed_at  when an operator last replayed it (the attempt budget starts again there).
-- sequence     the order of receipt (the sequence processed_webhook_events_sequence).
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

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at TIMESTAMP    DEFAULT NOW(),
    state        VARCHAR(9)   NOT NULL DEFAULT 'completed',
    claim_token  VARCHAR(32),
    expires_at   TIMESTAMPTZ,
    received_at  TIMESTAMPTZ,
    replayed_at  TIMESTAMPTZ,
    sequence     BIGINT,
    body         BYTEA,
    headers      TEXT,
    request_path TEXT,
    due_at       TIMESTAMPTZ,
    attempts     INTEGER      NOT NULL DEFAULT 0,
    replays      INTEGER      NOT NULL DEFAULT 0,
    last_error   TEXT,
    history      TEXT,
    ordering_key VARCHAR(200)
);

-- A table of the provider's documented schema: add the store's columns, and give the rows
-- already there their retention.
-- A table of the store's previous release: add inbox mode's columns. Each ADD COLUMN is a
-- change of the catalog only (no rewrite of the table); the state's check is replaced without
-- scanning the table (NOT VALID: the rows already there hold the old states, which the new
-- check allows too).
--
-- The ALTER TABLE needs the table's exclusive lock until the transaction ends, and every
-- statement on the table that arrives while it waits for that lock (behind a long transaction
-- that holds the table) queues behind it: it waits at most 500 ms, then fails (SQLSTATE 55P03)
-- and the queued claims go on. `migrate` then tries again after a pause of 1 s, for 30 s at
-- most; by hand, run this part again. (SET LOCAL: for this transaction only; run this part in
-- a transaction, as `migrate` does.)
SET LOCAL lock_timeout = '500ms';

ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS processed_at TIMESTAMP DEFAULT NOW(),
    ADD COLUMN IF NOT EXISTS state VARCHAR(9) NOT NULL DEFAULT 'completed',
    ADD COLUMN IF NOT EXISTS claim_token VARCHAR(32),
    ADD COLUMN IF NOT EXISTS expires_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS received_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS replayed_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS sequence BIGINT,
    ADD COLUMN IF NOT EXISTS body BYTEA,
    ADD COLUMN IF NOT EXISTS headers TEXT,
    ADD COLUMN IF NOT EXISTS request_path TEXT,
    ADD COLUMN IF NOT EXISTS due_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS replays INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_error TEXT,
    ADD COLUMN IF NOT EXISTS history TEXT,
    ADD COLUMN IF NOT EXISTS ordering_key VARCHAR(200),
    DROP CONSTRAINT IF EXISTS processed_webhook_events_state_check,
    ADD CONSTRAINT processed_webhook_events_state_check
        CHECK (state IN ('received', 'in_flight', 'completed', 'dead')) NOT VALID;

CREATE SEQUENCE IF NOT EXISTS processed_webhook_events_sequence
    OWNED BY processed_webhook_events.sequence;

-- The rows of a table of the provider's documented schema count as completed events (never
-- an inbox event, which keeps its expiry NULL until it is completed).
UPDATE processed_webhook_events
SET expires_at = COALESCE(CAST(processed_at AS TIMESTAMPTZ), now()) + INTERVAL '72 hours'
WHERE expires_at IS NULL AND received_at IS NULL;

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);

-- The purge deletes by each row's own expiry.
CREATE INDEX IF NOT EXISTS idx_webhook_expires_at
    ON processed_webhook_events (expires_at);

-- Outside a transaction (CONCURRENTLY: the indexes are built without blocking receipts and
-- claims), one statement at a time. Inbox mode's take reads the unfinished events in the order
-- of receipt; the events waiting for their first attempt, which it takes first; the
-- unfinished events of an ordering key, which hold back the key's later ones; and the dead
-- events, which the operators' gauges count.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_webhook_unfinished
    ON processed_webhook_events (sequence) WHERE state IN ('received', 'in_flight');
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_webhook_fresh
    ON processed_webhook_events (sequence) WHERE state = 'received' AND attempts = 0;
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_webhook_ordering
    ON processed_webhook_events (ordering_key, sequence)
    WHERE state IN ('received', 'in_flight') AND ordering_key IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_webhook_dead
    ON processed_webhook_events (sequence) WHERE state = 'dead';
