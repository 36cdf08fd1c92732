-- sangho-webhook-sqlx: the PostgreSQL schema of `PostgresStore` (table `processed_webhook_events`).
--
-- Safe to run again, and on a table created with the provider's documented schema (event_id,
-- event_type, processed_at and the index idx_webhook_processed_at): it keeps those columns as
-- they are and only adds what is missing. Rows already in such a table count as completed
-- events until their processed_at (or, without one, the time of the upgrade) plus the
-- retention (72 hours here; `PostgresStore::migrate` uses the store's adopted retention).
--
-- processed_at when the event was last claimed (the delivery that processed it arrived).
-- state        'in_flight' (a delivery holds a claim) or 'completed' (processed).
-- claim_token  the owner of the record (32 hex characters); renew, complete and release check
--              it; a completed row keeps it, so that a repeated completion succeeds.
-- expires_at   in flight: when the lease ends (then the next delivery takes the event over);
--              completed: when the retention ends (then the event is forgotten, and the purge
--              deletes the row). A point in time (timestamptz), the same in every session's
--              time zone. NULL (a row written later by another tool): completed, until the
--              purge removes it by processed_at.

CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     VARCHAR(50)  PRIMARY KEY,
    event_type   VARCHAR(100) NOT NULL,
    processed_at TIMESTAMP    DEFAULT NOW(),
    state        VARCHAR(9)   NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    claim_token  VARCHAR(32),
    expires_at   TIMESTAMPTZ
);

-- A table of the provider's documented schema: add the store's columns, and give the rows
-- already there their retention.
ALTER TABLE processed_webhook_events
    ADD COLUMN IF NOT EXISTS processed_at TIMESTAMP DEFAULT NOW(),
    ADD COLUMN IF NOT EXISTS state VARCHAR(9) NOT NULL DEFAULT 'completed'
        CHECK (state IN ('in_flight', 'completed')),
    ADD COLUMN IF NOT EXISTS claim_token VARCHAR(32),
    ADD COLUMN IF NOT EXISTS expires_at TIMESTAMPTZ;

UPDATE processed_webhook_events
SET expires_at = COALESCE(CAST(processed_at AS TIMESTAMPTZ), now()) + INTERVAL '72 hours'
WHERE expires_at IS NULL;

CREATE INDEX IF NOT EXISTS idx_webhook_processed_at
    ON processed_webhook_events (processed_at);

-- The purge deletes by each row's own expiry.
CREATE INDEX IF NOT EXISTS idx_webhook_expires_at
    ON processed_webhook_events (expires_at);
