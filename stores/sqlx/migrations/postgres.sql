-- sangho-webhook-sqlx: the PostgreSQL schema of `PostgresStore` (table `processed_webhook_events`).
--
-- Safe to run again, and safe on a table created with the provider's documented schema (event_id, event_type,
-- processed_at): it only adds what is missing. Rows written by the provider's documented recipe become
-- completed events with no retention of their own (the purge removes them by processed_at).
--
-- processed_at when the event was last claimed (the delivery that processed it arrived); the
--              purge scans its index.
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the claim (32 hex characters); complete/release check it.
-- expires_at   in flight: when the lease ends (then the next delivery takes the event over);
--              completed: when the retention ends (then the event is forgotten).
--
-- Completing an event changes only state and expires_at, which no index covers, and the
-- fillfactor leaves room on each page: so completion is a HOT update (no index writes).

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at TIMESTAMP    DEFAULT NOW(),
    state        VARCHAR(9)   NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    claim_token  VARCHAR(32),
    expires_at   TIMESTAMPTZ
) WITH (fillfactor = 70);

-- A table created with the provider's documented schema.
ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS state VARCHAR(9) NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    ADD COLUMN IF NOT EXISTS claim_token VARCHAR(32),
    ADD COLUMN IF NOT EXISTS expires_at TIMESTAMPTZ,
    SET (fillfactor = 70);

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);
