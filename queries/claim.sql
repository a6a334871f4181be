-- Claim up to $3 claimable jobs of the commands this agent runs. SKIP LOCKED
-- lets agents claim side by side; the lease bump fences out any earlier holder.
-- A queued job becomes accepted; a released running job stays running (the
-- agent resumes it).
WITH picked AS (
    SELECT a.job_id
    FROM active_jobs a
    WHERE a.agent_name IS NULL
      AND a.run_after <= now()
      AND a.command = ANY($4::text[])
    ORDER BY a.run_after, a.job_id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), claimed AS (
    -- Only queued or released running jobs; an unowned canceling job is the
    -- janitor's. (Filtering here, after the LIMIT, and not in picked: a join
    -- in the locking scan halved claim throughput.)
    UPDATE active_jobs a
    SET agent_name = $1, agent_generation = $2, lease = a.lease + 1,
        last_heartbeat = now(), claimed_at = now()
    FROM picked JOIN jobs pj ON pj.id = picked.job_id AND pj.status IN ('queued', 'running')
    WHERE a.job_id = picked.job_id
    RETURNING a.job_id, a.lease, a.handle, a.released_at, a.release_reason
), j AS (
    UPDATE jobs
    SET status = CASE WHEN status = 'queued' THEN 'accepted' ELSE status END,
        updated_at = now()
    FROM claimed
    WHERE jobs.id = claimed.job_id AND jobs.status IN ('queued', 'running')
    RETURNING jobs.id, jobs.command, jobs.plugin, jobs.status, jobs.context, jobs.attempt,
              extract(epoch FROM jobs.active_timeout)::float8 AS active_timeout,
              coalesce(extract(epoch FROM now() - jobs.attempt_started_at), 0)::float8 AS attempt_age,
              jobs.max_retry, extract(epoch FROM jobs.retry_backoff)::float8 AS retry_backoff,
              extract(epoch FROM jobs.retry_backoff_max)::float8 AS retry_backoff_max
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT j.id, 'claimed', $1, $2, c.lease, 'attempt ' || j.attempt
    FROM j JOIN claimed c ON c.job_id = j.id
)
SELECT j.id, j.command, j.plugin, j.status, j.context, j.attempt, c.lease, c.handle,
       j.active_timeout, j.attempt_age, j.max_retry, j.retry_backoff, j.retry_backoff_max
FROM j JOIN claimed c ON c.job_id = j.id;
