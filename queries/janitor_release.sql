-- Release a running job whose plugin can resume it: no holder, lease + 1,
-- status stays running, and the reason recorded. Fenced by (job_id, lease,
-- status). $1 job, $2 lease, $3 expected status, $4/$5 acting agent,
-- $6 reason, $7 event message.
WITH t AS (
    SELECT a.job_id
    FROM active_jobs a JOIN jobs j ON j.id = a.job_id
    WHERE a.job_id = $1 AND a.lease = $2 AND j.status = $3
), a AS (
    UPDATE active_jobs
    SET agent_name = NULL, agent_generation = NULL, lease = lease + 1,
        released_at = now(), release_reason = $6, resume = true
    WHERE job_id IN (SELECT job_id FROM t)
    RETURNING job_id, lease, command
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT job_id, 'released', $4, $5, lease, $7 FROM a
)
SELECT count(*) FROM a, LATERAL (SELECT pg_notify('tether_jobs', a.command)) n;
