-- sangho-webhook-sqlx: the PostgreSQL schema of `PostgresStore` (table `processed_webhook_events`).
--
-- Safe to run again, and safe on a table created with the seed's schema (event_id, event_type,
-- processed_at): it only adds what is missing. Rows written by the seed's recipe become
-- completed events with no retention of their own (the purge removes them by processed_at).
--
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the claim (32 hex characters); complete/release check it.
-- expires_at   in flight: when the lease ends (then the next delivery takes the event over);
--              completed: when the retention ends (then the event is forgotten).
-- processed_at when the row was last claimed or completed; the purge scans its index.

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at TIMESTAMP    DEFAULT NOW()
);

ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS state VARCHAR(9) NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    ADD COLUMN IF NOT EXISTS claim_token VARCHAR(32),
    ADD COLUMN IF NOT EXISTS expires_at TIMESTAMPTZ;

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);

-- Only the claims in flight (a handful of rows): lets the purge find abandoned claims cheaply.
CREATE INDEX IF NOT EXISTS idx_webhook_open_claims
    ON processed_webhook_events (expires_at) WHERE state = 'in_flight';
