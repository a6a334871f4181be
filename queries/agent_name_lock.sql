-- Session-level lock on an agent name, held for the process's lifetime on a
-- dedicated connection (two-key form: it cannot collide with the migration
-- lock). A crashed process's connection closes and frees it.
SELECT pg_try_advisory_lock(hashtext('tether-agent-name'), hashtext($1));
