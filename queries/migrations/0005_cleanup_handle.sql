-- tether schema v5: a Cleanup carries the handle of the attempt that left the
-- remote work, so the plugin stops what was launched where it was launched
-- (the cluster, the tasks), not what the config says today.
ALTER TABLE cleanups ADD COLUMN handle bytea;
