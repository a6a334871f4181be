-- Forget agents that stopped or went silent more than @retention seconds
-- ago (a stopping agent stamps last_seen as it stops) and hold no job, up to
-- @batch rows, oldest first, through agents_last_seen. SKIP LOCKED: an agent
-- registering under the name at the same time wins (it refreshes last_seen,
-- and the row no longer matches), and janitors do not queue on each other.
WITH old AS (
    SELECT g.name
    FROM agents g
    WHERE g.last_seen < now() - @retention::float8 * interval '1 second'
      AND NOT EXISTS (SELECT 1 FROM active_jobs a WHERE a.agent_name = g.name)
    ORDER BY g.last_seen
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM agents g
USING old
WHERE g.name = old.name
RETURNING g.name;
