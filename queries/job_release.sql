-- Fenced release by the holder itself, for many jobs in one statement (a
-- drain hands off every resumable job at once): stop holding them and make
-- them claimable at once, with each lease bumped so any late write of ours is
-- refused. Status stays running: the next holder resumes them. $1 job IDs,
-- $2 their leases, $3/$4 the holder, $5 the reason. Returns the released IDs;
-- a missing one had already been taken over.
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::bigint[]) AS t(job_id, lease)
), fence AS (
    SELECT a.job_id, j.status = 'running' AS resume
    FROM active_jobs a JOIN input i ON i.job_id = a.job_id AND i.lease = a.lease
    JOIN jobs j ON j.id = a.job_id
    WHERE a.agent_name = $3 AND a.agent_generation = $4
    ORDER BY a.job_id
    FOR UPDATE OF a
), r AS (
    UPDATE active_jobs a
    SET agent_name = NULL, agent_generation = NULL, lease = a.lease + 1,
        released_at = now(), release_reason = $5, resume = fence.resume
    FROM fence
    WHERE a.job_id = fence.job_id
    RETURNING a.job_id, a.lease, a.command
), q AS (
    -- A job released before its plugin was called never ran: queue it again.
    UPDATE jobs SET status = 'queued', updated_at = now()
    WHERE id IN (SELECT job_id FROM r) AND status = 'accepted'
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT job_id, 'released', $3, $4, lease, $5 FROM r
), n AS (
    SELECT pg_notify('tether_jobs', c) FROM (SELECT DISTINCT command AS c FROM r) x
)
SELECT job_id FROM r WHERE (SELECT count(*) FROM n) >= 0;
