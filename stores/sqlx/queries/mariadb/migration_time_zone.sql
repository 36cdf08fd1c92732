-- For the migration script's run: the time zone UTC, so that the TIMESTAMP `processed_at` of
-- an adopted table reads as UTC; the session's own time zone is kept aside
-- (migration_time_zone_restore.sql sets it back).
SET @sangho_time_zone = @@session.time_zone, time_zone = '+00:00';
