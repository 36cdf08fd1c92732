-- Inbox mode: extend a worker's lease (owner-checked; a lease that ran out is extended too
-- while nobody took the event over), in one transaction: the event's row is locked while the
-- token holds it, changed, and the answer says whether it was. A completion by the token
-- answers held, unchanged.
-- Binds (the first statement): event id, the worker's claim token, the lease in µs.
-- Answers 'renewed' when the token holds the event; no row otherwise.
SET @sangho_event = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_token = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_lease = ?, @sangho_held = NULL;
SELECT event_id INTO @sangho_held FROM {table}
WHERE event_id = @sangho_event AND claim_token = @sangho_token
  AND state IN ('in_flight', 'completed') AND received_at IS NOT NULL
FOR UPDATE;
UPDATE {table}
SET due_at = IF(state = 'in_flight', UTC_TIMESTAMP(6) + INTERVAL @sangho_lease MICROSECOND, due_at)
WHERE event_id = @sangho_held;
SELECT 'renewed' FROM DUAL WHERE @sangho_held IS NOT NULL;
