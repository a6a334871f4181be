-- The liveness check, run by one agent per keepalive for the whole fleet
-- (liveness_turn.sql): the agents not stopped whose name lock nobody holds,
-- with their last_seen, their announced keepalive and dead_after (0 when not
-- announced), whether they hold work (an active_jobs row under their name
-- and generation, looked up through active_jobs_agent), and the first-free
-- memory stored by the previous check (agents_lock_memory.sql). The caller
-- (@self_name) is left out: it is running this statement. Agents without
-- work are listed too, so every view of an agent shows the same verdict;
-- only those with work have anything to settle.
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
-- pg_locks is read once, into a hashed subplan (NOT IN over a subquery
-- without outer references): each agents row is one hash probe. The planner
-- estimates pg_lock_status() after these filters at one row, and a NOT
-- EXISTS anti join on that estimate became a nested loop over every held
-- lock per agents row (N² at N agents: 19,803 join-filter rows at 200).
-- objid is never NULL for an advisory lock, so NOT IN means NOT EXISTS here.
SELECT g.name, g.generation, g.last_seen,
       coalesce(extract(epoch FROM g.keepalive), 0)::float8,
       coalesce(extract(epoch FROM g.dead_after), 0)::float8,
       g.lock_free_since, g.lock_found_dead,
       -- OFFSET 0: one index lookup per agent, never a join over every active row.
       EXISTS (SELECT 1 FROM active_jobs a WHERE a.agent_name = g.name AND a.agent_generation = g.generation OFFSET 0)
FROM agents g
WHERE g.state <> 'stopped' -- a stopped agent's jobs are the janitor's at once
  AND g.name <> @self_name
  AND hashtext(g.name)::oid NOT IN (
      SELECT l.objid
      FROM pg_locks l
      WHERE l.locktype = 'advisory'
        AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
        AND l.classid = hashtext('tether-agent-name')::oid
        AND l.objsubid = 2
        AND l.granted
        AND l.objid IS NOT NULL);
