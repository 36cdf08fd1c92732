-- Inbox mode: give an event back at shutdown (owner-checked), in one transaction as
-- inbox_renew.sql: due at once, and the attempt does not count.
-- Binds (the first statement): event id, the worker's claim token.
-- Answers 'abandoned' when the event was given back; no row when the token did not hold it.
SET @sangho_event = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_token = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_held = NULL;
SELECT event_id INTO @sangho_held FROM {table}
WHERE event_id = @sangho_event AND claim_token = @sangho_token
  AND state = 'in_flight' AND received_at IS NOT NULL
FOR UPDATE;
UPDATE {table}
SET state = 'received', claim_token = NULL, due_at = UTC_TIMESTAMP(6),
    attempts = GREATEST(attempts - 1, 0)
WHERE event_id = @sangho_held;
SELECT 'abandoned' FROM DUAL WHERE @sangho_held IS NOT NULL;
