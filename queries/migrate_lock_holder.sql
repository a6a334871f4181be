-- Who holds the migration lock on @key (bigint advisory locks are split
-- into classid, the high 32 bits, and objid, the low ones, with objsubid 1)
-- in this database: the session's pid, application_name and client address,
-- and how long its transaction (its session, for a session lock) has run.
-- No row when it is free; empty text where pg_stat_activity hides another
-- role's session from this one.
SELECT l.pid,
       coalesce(a.application_name, ''),
       coalesce(host(a.client_addr), ''),
       coalesce(extract(epoch FROM now() - coalesce(a.xact_start, a.backend_start)), 0)::float8
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint) = @key::bigint
ORDER BY l.pid
LIMIT 1;
