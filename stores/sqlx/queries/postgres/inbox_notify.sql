-- Inbox mode: wakes the workers of every process listening on the table's channel, after
-- receipts, abandons and replays. Sent on its own, after their commits, and coalesced (one
-- notification covers every change since the previous one): NOTIFY serializes the commits
-- that carry it, so it stays out of the receipts' transactions.
SELECT pg_notify('{table}_inbox', '');
