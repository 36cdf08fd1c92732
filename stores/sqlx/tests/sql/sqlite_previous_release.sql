-- The SQLite schema of the store's previous release, as it shipped (migrations/sqlite.sql), for
-- the tests of the upgrade to inbox mode.
-- sangho-webhook-sqlx: the SQLite schema of `SqliteStore` (table `processed_webhook_events`).
--
-- Safe to run again. The columns of the provider's documented schema (event_id, event_type,
-- processed_at) come first, with the same types.
--
-- processed_at when the event was last claimed (the delivery that processed it arrived), UTC
--              text 'YYYY-MM-DD HH:MM:SS.SSS' (CURRENT_TIMESTAMP's format, with milliseconds).
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the record (32 hex characters); renew, complete and release check
--              it; a completed row keeps it, so that a repeated completion succeeds.
-- expires_at   Unix time in milliseconds (UTC by construction). In flight: when the lease ends
--              (then the next delivery takes the event over); completed: when the retention
--              ends (then the event is forgotten, and the purge deletes the row). NULL (a row
--              written by another tool): completed, until the purge removes it by
--              processed_at.
--
-- Run `PRAGMA journal_mode = WAL;` once on the database file as well (`SqliteStore::migrate`
-- does): readers then never wait for the writer.

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  NOT NULL PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at TIMESTAMP    DEFAULT CURRENT_TIMESTAMP,
    state        VARCHAR(9)   NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    claim_token  VARCHAR(32),
    expires_at   INTEGER
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);

-- The purge deletes by each row's own expiry.
CREATE INDEX IF NOT EXISTS idx_webhook_expires_at
    ON processed_webhook_events (expires_at);

-- A table of the provider's documented schema (event_id, event_type, processed_at) is
-- upgraded by `SqliteStore::migrate`; by hand, run the statements below once instead of the
-- CREATE TABLE above (SQLite has no ADD COLUMN IF NOT EXISTS). The rows already there count as
-- completed events until their processed_at (or the time of the upgrade) plus the retention
-- (72 hours here).
--
-- ALTER TABLE processed_webhook_events ADD COLUMN state VARCHAR(9) NOT NULL DEFAULT 'completed'
--     CHECK (state IN ('in_flight', 'completed'));
-- ALTER TABLE processed_webhook_events ADD COLUMN claim_token VARCHAR(32);
-- ALTER TABLE processed_webhook_events ADD COLUMN expires_at INTEGER;
-- UPDATE processed_webhook_events
-- SET expires_at = CAST(round((julianday(COALESCE(processed_at, 'now')) - 2440587.5)
--                             * 86400000.0) AS INTEGER) + 72 * 3600 * 1000
-- WHERE expires_at IS NULL;
