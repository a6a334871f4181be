-- The liveness check, every keepalive in every agent: the agents that hold
-- work (an active_jobs row under their name and generation, looked up
-- through active_jobs_agent) and whose name lock nobody holds, with their
-- last_seen, their announced keepalive and dead_after (0 when not announced)
-- and the database clock. The caller (@self_name) is left out: it
-- is running this statement.
--
-- The name lock is pg_try_advisory_lock(hashtext('tether-agent-name'),
-- hashtext(name)) (agent_name_lock.sql). pg_locks shows a two-int4 advisory
-- key "with the first key in the classid column, the second key in the objid
-- column, and objsubid equal to 2", in the database it was taken in
-- (https://www.postgresql.org/docs/15/view-pg-locks.html). classid and objid
-- are oid: int4::oid keeps the bits, so a negative hashtext compares equal
-- (hashtext('a1') = -807111313 shows as objid 3487855983; checked on 15.18).
-- A hash collision with another live agent's name can only hide a free lock:
-- that agent's jobs then wait for stale_job, as without this check.
--
-- pg_locks is read once (MATERIALIZED): it is a snapshot of the lock table,
-- cheap for the few thousand locks a server holds, and never a scan of jobs.
WITH held AS MATERIALIZED (
    SELECT l.objid
    FROM pg_locks l
    WHERE l.locktype = 'advisory'
      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
      AND l.classid = hashtext('tether-agent-name')::oid
      AND l.objsubid = 2
      AND l.granted
)
SELECT g.name, g.generation, g.last_seen,
       coalesce(extract(epoch FROM g.keepalive), 0)::float8,
       coalesce(extract(epoch FROM g.dead_after), 0)::float8,
       now()
FROM agents g
WHERE g.state <> 'stopped' -- a stopped agent's jobs are the janitor's at once
  AND g.name <> @self_name
  -- OFFSET 0: one index lookup per agent, never a join over every active row.
  AND EXISTS (SELECT 1 FROM active_jobs a WHERE a.agent_name = g.name AND a.agent_generation = g.generation OFFSET 0)
  AND NOT EXISTS (SELECT 1 FROM held WHERE held.objid = hashtext(g.name)::oid);
