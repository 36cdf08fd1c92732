-- The connection's `synchronous` setting, for `migrate`: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA.
-- Below FULL, an acknowledged inbox receipt can be lost on a power loss.
PRAGMA synchronous;
