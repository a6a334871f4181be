-- Serialises concurrent migrators (several agents starting at once) until
-- the transaction ends: true when this transaction took the lock on @key, a
-- fixed key owned by tether's migrations; false when another session holds
-- it (the migrator then says who, and tries again).
SELECT pg_try_advisory_xact_lock(@key::bigint);
