-- Serialises concurrent migrators (several agents starting at once) until
-- the transaction ends. $1 is a fixed key owned by tether's migrations.
SELECT pg_advisory_xact_lock($1);
