-- Begins a group commit's transaction, in one round trip: its statements wait at most 100 ms
-- for a row lock that another transaction holds (the grouped claims and renewals set the same
-- bound in themselves). A write that meets such a lock fails the group quickly; the group is
-- rolled back and each of its writes runs again on its own, under the store's own lock
-- timeout, so that the others are never held up behind a handler's transaction.
BEGIN;
SET LOCAL lock_timeout = '100ms';
