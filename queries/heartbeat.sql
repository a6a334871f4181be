-- One statement per agent per tick: renew this process's agents row, which
-- renews every lease it holds (a lease held by the row's generation and not
-- detached is as fresh as last_seen; janitor_candidates.sql), so the writes
-- do not grow with held jobs. It reads back which of @job_ids/@leases (what
-- the process believes it holds) it still holds, with their status (a job
-- missing from the answer is a lost lease), and which leases the database
-- says this generation holds that the process did not list (orphan rows:
-- a claim whose answer was lost, say). The first column is false when this
-- process's row was not renewed; the second then tells why: true when the
-- name has a row of another generation (another process registered under
-- it: stop), false when the name has no row at all (an operator or agent
-- retention deleted it: register again). Without the row no lease is
-- returned, so the caller must not read the answer as every lease lost.
-- The last two columns are the server's WAL position and timeline
-- (internal/dbhistory), the same on every row; the third says an operator
-- asked this agent to drain (agent_drain_request.sql), read from the row the
-- statement renews anyway.
--
-- Run with JIT off (store.QueryHot): every agent runs it every keepalive, and
-- its estimate grows with the active rows while it reads one agent's.
WITH ag AS (
    UPDATE agents SET last_seen = now()
    WHERE name = @name AND generation = @generation
    RETURNING name, drain_requested_at IS NOT NULL AS drain
), held AS (
    SELECT * FROM unnest(@job_ids::text[], @leases::bigint[]) AS t(job_id, lease)
), mine AS (
    SELECT a.job_id, a.lease, j.status, NOT EXISTS (SELECT 1 FROM held h WHERE h.job_id = a.job_id AND h.lease = a.lease) AS orphan
    FROM active_jobs a
    JOIN jobs j ON j.id = a.job_id
    WHERE a.agent_name = @name AND a.agent_generation = @generation AND NOT a.detached
      AND EXISTS (SELECT 1 FROM ag) -- a superseded process is told nothing
), w AS (
    -- Where the server's history is (wal_position.sql): through a pooler
    -- no new connection shows a failover, so the heartbeat does.
    SELECT pg_current_wal_lsn()::text AS lsn, substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) AS timeline
)
SELECT EXISTS (SELECT 1 FROM ag),
       EXISTS (SELECT 1 FROM agents WHERE name = @name), -- by the primary key
       m.job_id, m.lease, m.status, m.orphan, w.lsn, w.timeline,
       coalesce((SELECT drain FROM ag), false)
FROM w
LEFT JOIN mine m ON true;
