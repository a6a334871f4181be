-- Put a job nobody started back in the queue, fenced by (job_id, lease,
-- status). The lease bump refuses any late write of the old owner.
-- $1 job, $2 lease, $3 expected status, $4/$5 acting agent, $6 message.
WITH t AS (
    SELECT a.job_id
    FROM active_jobs a JOIN jobs j ON j.id = a.job_id
    WHERE a.job_id = $1 AND a.lease = $2 AND j.status = $3
), a AS (
    UPDATE active_jobs
    SET agent_name = NULL, agent_generation = NULL, lease = lease + 1,
        last_heartbeat = NULL, claimed_at = NULL
    WHERE job_id IN (SELECT job_id FROM t)
    RETURNING job_id, lease, command
), j AS (
    UPDATE jobs SET status = 'queued', updated_at = now()
    WHERE id IN (SELECT job_id FROM a)
    RETURNING id
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT job_id, 'requeued', $4, $5, lease, $6 FROM a
)
SELECT count(*) FROM a, LATERAL (SELECT pg_notify('tether_jobs', a.command)) n;
