-- Inbox mode: make an event due now with a fresh attempt budget, its history kept, in one
-- transaction as inbox_renew.sql: a waiting or dead event, one in flight whose lease ran out,
-- and a completed one (still within its retention) only when forced. The event takes a new
-- sequence number, the last place in the order of receipt (behind the events of its ordering
-- key still unfinished), under its key's lock, as a receipt does: `inbox_key_lock.sql` runs
-- before this transaction on its connection (and keeps the key in `@sangho_key`),
-- `inbox_key_unlock.sql` after its commit. The event is replayed only while it has the key that
-- is locked (an event discarded and received again with another key meanwhile is not).
-- Binds (the first statement): event id, 1 to force (0 otherwise), the reason.
-- Answers 'replayed'; no row when it changed nothing (then inbox_state.sql says why).
--
-- The assignments are evaluated in order: the history reads the state before it changes.
SET @sangho_event = CONVERT(? USING ascii) COLLATE ascii_bin, @sangho_force = ?,
    @sangho_reason = ?, @sangho_held = NULL;
SELECT event_id INTO @sangho_held FROM {table}
WHERE event_id = @sangho_event AND received_at IS NOT NULL
  AND ordering_key <=> @sangho_key
  AND (state IN ('received', 'dead')
       OR (state = 'in_flight' AND due_at <= UTC_TIMESTAMP(6))
       OR (state = 'completed' AND @sangho_force = 1 AND expires_at > UTC_TIMESTAMP(6)))
FOR UPDATE;
UPDATE {table}
SET history = RIGHT(CONCAT(COALESCE(history, ''), CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'),
                           IF(state = 'completed', ' replayed (forced): ', ' replayed: '),
                           @sangho_reason, CHAR(10 USING utf8mb4)),
                    8192),
    state = 'received',
    claim_token = NULL,
    processed_at = NULL,
    expires_at = NULL,
    due_at = UTC_TIMESTAMP(6),
    attempts = 0,
    replays = replays + 1,
    replayed_at = UTC_TIMESTAMP(6),
    sequence = NEXTVAL({table}_sequence)
WHERE event_id = @sangho_held;
SELECT 'replayed' FROM DUAL WHERE @sangho_held IS NOT NULL;
