-- sangho-webhook-sqlx: the SQLite schema of `SqliteStore` (table `processed_webhook_events`).
--
-- Safe to run again. The columns of the provider's documented schema (event_id, event_type, processed_at)
-- come first, with the same types.
--
-- processed_at when the event was last claimed (the delivery that processed it arrived), UTC
--              text 'YYYY-MM-DD HH:MM:SS.SSS' (CURRENT_TIMESTAMP's format, with
--              milliseconds); the purge scans its index.
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the claim (32 hex characters); complete/release check it.
-- expires_at   Unix time in milliseconds. In flight: when the lease ends (then the next delivery
--              takes the event over); completed: when the retention ends (then the event is
--              forgotten). NULL (rows written by other tools): completed, kept until purged.
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
