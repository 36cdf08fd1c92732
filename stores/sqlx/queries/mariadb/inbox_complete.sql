-- Inbox mode: record the event as completed by a worker's token (owner-checked; a repeated
-- completion succeeds), in one transaction as inbox_renew.sql. From now on it is a completed
-- record like the direct mode's: a duplicate until `expires_at`, then the purge deletes it;
-- `processed_at` says when.
-- Binds (the first statement): event id, the worker's claim token, the retention in µs.
-- Answers 'completed' when the event is completed by the token; no row otherwise.
--
-- The assignments are evaluated in order: `state`, assigned last, is the old state in every
-- condition.
SET @sangho_event = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_token = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_retention = ?, @sangho_held = NULL;
SELECT event_id INTO @sangho_held FROM {table}
WHERE event_id = @sangho_event AND claim_token = @sangho_token
  AND state IN ('in_flight', 'completed') AND received_at IS NOT NULL
FOR UPDATE;
UPDATE {table}
SET processed_at = IF(state = 'completed', processed_at, UTC_TIMESTAMP(6)),
    expires_at = IF(state = 'completed', expires_at,
                    UTC_TIMESTAMP(6) + INTERVAL @sangho_retention MICROSECOND),
    due_at = NULL,
    state = 'completed'
WHERE event_id = @sangho_held;
SELECT 'completed' FROM DUAL WHERE @sangho_held IS NOT NULL;
