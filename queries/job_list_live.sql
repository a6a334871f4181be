-- job_list.sql for one live status (@status: queued, accepted or running),
-- which no index of jobs names (schema v12: a status change among those is
-- a HOT update): every live job has its active_jobs row, so the list walks
-- active_jobs' primary key newest first and reads each job by its own.
-- With @agent (any status or none) it lists the jobs that agent holds now
-- (accepted, running or canceling under its lease): queued and ended jobs
-- have no holder; jobs keep no record of past holders but their events.
SELECT {{job_columns}}
FROM active_jobs a
JOIN jobs j ON j.id = a.job_id
WHERE (@status::text = '' OR j.status = @status)
  AND (@agent::text = '' OR a.agent_name = @agent)
  AND (@command::text = '' OR j.command = @command)
  AND (@submitter::text = '' OR j.submitter = @submitter)
  AND (@idempotency_key::text = '' OR j.idempotency_key = @idempotency_key)
  AND (@after::text = '' OR a.job_id < @after)
  AND (@since::timestamptz IS NULL OR (j.created_at >= @since AND a.job_id >= @since_id::text))
  AND (@until::timestamptz IS NULL OR (j.created_at < @until AND a.job_id < @until_id::text))
ORDER BY a.job_id DESC
LIMIT @limit;
