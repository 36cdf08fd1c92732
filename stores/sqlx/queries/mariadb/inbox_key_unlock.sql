-- Inbox mode: release the ordering key's lock `inbox_key_lock.sql` took on this connection,
-- once the receipt or the replay it guarded has committed (nothing when it took none).
DO RELEASE_LOCK(@sangho_key_lock), @sangho_key_lock := NULL, @sangho_key := NULL;
