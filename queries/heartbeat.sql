-- One statement per agent per tick: refresh the agent and every lease it holds,
-- and return which it still holds with their status. A job missing from the
-- answer is a lost lease. The first column is false when this process's row
-- was not renewed; the second then tells why: true when the name has a row
-- of another generation (another process registered under it: stop), false
-- when the name has no row at all (an operator or agent retention deleted
-- it: register again). Without the row nothing is renewed and no lease is
-- returned, so the caller must not read the answer as every lease lost.
WITH ag AS (
    UPDATE agents SET last_seen = now()
    WHERE name = $1 AND generation = $2
    RETURNING name
), held AS (
    SELECT * FROM unnest($3::text[], $4::bigint[]) AS t(job_id, lease)
), locked AS (
    -- Lock in job_id order, like the log flush, so the two never deadlock.
    SELECT a.job_id
    FROM active_jobs a JOIN held ON a.job_id = held.job_id AND a.lease = held.lease
    WHERE a.agent_name = $1 AND a.agent_generation = $2
      AND EXISTS (SELECT 1 FROM ag) -- a superseded process renews nothing
    ORDER BY a.job_id
    FOR UPDATE OF a
), hb AS (
    UPDATE active_jobs a
    SET last_heartbeat = now()
    FROM locked
    WHERE a.job_id = locked.job_id
    RETURNING a.job_id, a.lease
)
SELECT EXISTS (SELECT 1 FROM ag),
       EXISTS (SELECT 1 FROM agents WHERE name = $1), -- by the primary key
       hb.job_id, hb.lease, j.status
FROM (SELECT 1) one
LEFT JOIN (hb JOIN jobs j ON j.id = hb.job_id) ON true;
