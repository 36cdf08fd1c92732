-- sangho-webhook-sqlx: the MariaDB schema of `MariaDbStore` (table `processed_webhook_events`).
-- MariaDB 10.5 or later (the claim uses INSERT … RETURNING, which MySQL lacks).
--
-- Safe to run again. The columns of the provider's documented schema (event_id, event_type, processed_at)
-- come first. Every time is UTC (UTC_TIMESTAMP), whatever the server's time zone.
--
-- event_id     ASCII, compared byte for byte: event ids are case-sensitive.
-- processed_at when the event was last claimed (the delivery that processed it arrived); the
--              purge scans its index.
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the claim (32 hex characters); complete/release check it.
-- expires_at   in flight: when the lease ends (then the next delivery takes the event over);
--              completed: when the retention ends (then the event is forgotten). NULL (rows
--              written by other tools): completed, kept until purged.

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at DATETIME(6)  DEFAULT (UTC_TIMESTAMP(6)),
    state        VARCHAR(9)   CHARACTER SET ascii NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    claim_token  CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin,
    expires_at   DATETIME(6)
) ENGINE = InnoDB;

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);
