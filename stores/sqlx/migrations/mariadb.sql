-- sangho-webhook-sqlx: the MariaDB schema of `MariaDbStore` (table `processed_webhook_events`).
-- MariaDB 10.5 or later (the statements use INSERT … RETURNING, which MySQL lacks).
--
-- Safe to run again, and on a table created with the provider's documented schema (event_id,
-- event_type, processed_at): it keeps those columns as they are and only adds what is missing.
-- Rows already in such a table count as completed events until their processed_at (or, without
-- one, the time of the upgrade) plus the retention (72 hours here; `MariaDbStore::migrate`
-- uses the store's adopted retention). Run it in a session whose time_zone is '+00:00' (as
-- `MariaDbStore::migrate` does), so that a TIMESTAMP processed_at reads as UTC.
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
--              purge removes it by processed_at.

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at DATETIME(6)  DEFAULT (UTC_TIMESTAMP(6)),
    state        VARCHAR(9)   CHARACTER SET ascii NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    claim_token  CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin,
    expires_at   DATETIME(6)
) ENGINE = InnoDB;

-- A table of the provider's documented schema: add the store's columns, and give the rows
-- already there their retention.
ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS processed_at DATETIME(6) DEFAULT (UTC_TIMESTAMP(6)),
    ADD COLUMN IF NOT EXISTS state VARCHAR(9) CHARACTER SET ascii NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    ADD COLUMN IF NOT EXISTS claim_token CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
    ADD COLUMN IF NOT EXISTS expires_at DATETIME(6);

UPDATE processed_webhook_events
SET expires_at = COALESCE(processed_at, UTC_TIMESTAMP(6)) + INTERVAL 72 HOUR
WHERE expires_at IS NULL;

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);

-- The purge deletes by each row's own expiry.
CREATE INDEX IF NOT EXISTS idx_webhook_expires_at
    ON processed_webhook_events (expires_at);
