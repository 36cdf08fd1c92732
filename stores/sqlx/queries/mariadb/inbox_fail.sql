-- Inbox mode: record a failed attempt (owner-checked), in one transaction as inbox_renew.sql:
-- its time and error in the history (the last 8192 characters kept), and the event due again
-- after the delay, or dead.
-- Binds (the first statement): event id, the worker's claim token, the error excerpt, 1 for
-- dead (0 otherwise), the delay in µs.
-- Answers 'recorded' when the attempt is recorded; no row when the token does not hold the
-- event.
--
-- The assignments are evaluated in order: the history reads the attempts before anything else
-- changes.
SET @sangho_event = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_token = CONVERT(? USING ascii) COLLATE ascii_bin,
    @sangho_error = ?, @sangho_dead = ?, @sangho_delay = ?, @sangho_held = NULL;
SELECT event_id INTO @sangho_held FROM {table}
WHERE event_id = @sangho_event AND claim_token = @sangho_token
  AND state = 'in_flight' AND received_at IS NOT NULL
FOR UPDATE;
UPDATE {table}
SET history = RIGHT(CONCAT(COALESCE(history, ''), CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'),
                           ' attempt ', attempts, ': ', @sangho_error, CHAR(10 USING utf8mb4),
                           IF(@sangho_dead = 1,
                              CONCAT(CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'), ' dead', CHAR(10 USING utf8mb4)),
                              '')),
                    8192),
    state = IF(@sangho_dead = 1, 'dead', 'received'),
    claim_token = NULL,
    due_at = IF(@sangho_dead = 1, NULL, UTC_TIMESTAMP(6) + INTERVAL @sangho_delay MICROSECOND),
    last_error = @sangho_error
WHERE event_id = @sangho_held;
SELECT 'recorded' FROM DUAL WHERE @sangho_held IS NOT NULL;
