-- What `migrate` checks of the server: its version, and the settings that make a commit
-- durable (InnoDB's redo log flushed at each commit; with the binary log on, the binary log
-- synced at each commit too).
-- Answers one row: VERSION(), innodb_flush_log_at_trx_commit, whether the binary log is on,
-- sync_binlog.
SELECT VERSION(), CAST(@@innodb_flush_log_at_trx_commit AS SIGNED), CAST(@@log_bin AS SIGNED),
       CAST(@@sync_binlog AS SIGNED);
