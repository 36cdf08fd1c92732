-- Sets back the session's time zone that migration_time_zone.sql kept aside.
SET time_zone = @sangho_time_zone;
