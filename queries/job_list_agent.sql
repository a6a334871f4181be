-- job_list.sql for the jobs one agent holds now (@agent): accepted, running
-- or canceling under its lease. Ended and queued jobs have no holder, so
-- they are never listed here; jobs keep no record of past holders other
-- than their events. The walk starts at the agent's own active_jobs rows
-- (index active_jobs_agent), so it costs what the agent holds, not what
-- the fleet holds.
SELECT {{job_columns}}
FROM active_jobs a
JOIN jobs j ON j.id = a.job_id
WHERE a.agent_name = @agent::text
  AND (@status::text = '' OR j.status = @status)
  AND (@command::text = '' OR j.command = @command)
  AND (@submitter::text = '' OR j.submitter = @submitter)
  AND (@idempotency_key::text = '' OR j.idempotency_key = @idempotency_key)
  AND (@after::text = '' OR a.job_id < @after)
  AND (@since::timestamptz IS NULL OR (j.created_at >= @since AND a.job_id >= @since_id::text))
  AND (@until::timestamptz IS NULL OR (j.created_at < @until AND a.job_id < @until_id::text))
ORDER BY a.job_id DESC
LIMIT @limit;
