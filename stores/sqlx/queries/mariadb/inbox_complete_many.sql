-- Inbox mode: record the events of a turn of completions (see `inbox_complete.sql` for one)
-- as completed by their workers' tokens, in one statement committed on its own: one flush for
-- the turn.
-- Binds: the retention in µs, then each completion's event id and token ({pairs}: `(?, ?)`
-- for each, padded with NULL pairs, which match nothing).
-- Answers by the rows it matched (the store connects with CLIENT_FOUND_ROWS): one for each
-- completion whose token holds its event (or completed it already). When fewer matched, the
-- store runs each completion of the turn again alone (`inbox_complete.sql`), to answer each.
--
-- It never waits for a row lock (`innodb_lock_wait_timeout = 0`): if another transaction holds
-- one of the rows (a handler's own, still open), it fails at once having changed nothing, and
-- each completion of the turn runs again alone, so that only the held one waits.
--
-- The assignments are evaluated in order: `state`, assigned last, is the old state in every
-- condition.
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE {table}
SET processed_at = IF(state = 'completed', processed_at, UTC_TIMESTAMP(6)),
    expires_at = IF(state = 'completed', expires_at,
                    UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND),
    due_at = NULL,
    state = 'completed'
WHERE (event_id, claim_token) IN ({pairs})
  AND state IN ('in_flight', 'completed') AND received_at IS NOT NULL;
