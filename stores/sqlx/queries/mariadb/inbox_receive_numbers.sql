-- Inbox mode, in a group commit: draw the sequence numbers of the receipts that
-- `inbox_receive_many.sql` writes next, one for each, in one round trip (and in the group's
-- transaction: a sequence's numbers are drawn outside any transaction, so a group rolled back
-- leaves a gap, as a rolled-back `inbox_receive.sql` does).
-- Binds: how many numbers to draw.
-- Answers one row (`number`, NULL) for each number drawn. The server's bound on a recursive
-- query's iterations (`max_recursive_iterations`, 1 000 by default) would cut a larger group's
-- numbers short without an error, so the statement lifts it; the count bounds the recursion.
SET STATEMENT max_recursive_iterations = 1000000 FOR
WITH RECURSIVE drawn (n) AS (
    SELECT 1
    UNION ALL
    SELECT n + 1 FROM drawn WHERE n < ?
)
SELECT CAST(NEXTVAL({table}_sequence) AS CHAR) AS number, CAST(NULL AS CHAR) AS unused
FROM drawn;
