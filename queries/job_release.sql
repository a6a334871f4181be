-- Fenced release by the holder itself: stop watching a resumable job and make
-- it claimable at once, with the lease bumped so any late write of ours is
-- refused. Status stays running: the next holder resumes it.
WITH fence AS (
    SELECT job_id FROM active_jobs WHERE job_id = $1 AND lease = $2 FOR UPDATE
), r AS (
    UPDATE active_jobs
    SET agent_name = NULL, agent_generation = NULL, lease = lease + 1,
        released_at = now(), release_reason = $5
    WHERE job_id IN (SELECT job_id FROM fence)
    RETURNING job_id, lease
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT job_id, 'released', $3, $4, lease, $5 FROM r
), n AS (
    SELECT pg_notify('tether_jobs', a.command) FROM active_jobs a WHERE a.job_id IN (SELECT job_id FROM r)
)
SELECT count(*) FROM r, n;
