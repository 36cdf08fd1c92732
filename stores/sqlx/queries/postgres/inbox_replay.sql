-- Inbox mode: make an event due now with a fresh attempt budget, its history kept: a waiting
-- or dead event, one in flight whose lease ran out, and a completed one (still within its
-- retention) only when forced. The event takes a new sequence number, the last place in the
-- order of receipt (behind the events of its ordering key still unfinished), under its key's
-- transaction lock, as a receipt does.
-- Binds: $1 event id, $2 1 to force (0 otherwise), $3 the reason.
-- Answers 'replayed'; no row when it changed nothing (then `inbox_state.sql` says why).
WITH key_lock AS (
    SELECT pg_advisory_xact_lock(hashtextextended(ordering_key, 0))
    FROM {table}
    WHERE event_id = $1 AND ordering_key IS NOT NULL
),
replayed AS (
    UPDATE {table}
    SET history = right(
            COALESCE(history, '')
            || to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
            || CASE WHEN state = 'completed' THEN ' replayed (forced): ' ELSE ' replayed: ' END
            || $3 || E'\n', 8192),
        state = 'received',
        claim_token = NULL,
        processed_at = NULL,
        expires_at = NULL,
        due_at = statement_timestamp(),
        attempts = 0,
        replays = replays + 1,
        replayed_at = statement_timestamp(),
        sequence = nextval('{table}_sequence')
    FROM (SELECT count(*) FROM key_lock) AS locked
    WHERE event_id = $1 AND received_at IS NOT NULL
      AND (state IN ('received', 'dead')
           OR (state = 'in_flight' AND due_at <= statement_timestamp())
           OR (state = 'completed' AND $2 = 1 AND expires_at > statement_timestamp()))
    RETURNING 1
)
SELECT 'replayed' FROM replayed;
