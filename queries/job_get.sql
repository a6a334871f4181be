SELECT j.id, j.command, j.plugin, j.status, j.context, j.attempt,
       coalesce(j.error, ''), coalesce(j.error_class, ''), j.result,
       j.submitter, coalesce(j.idempotency_key, ''),
       j.created_at, j.updated_at, j.started_at, j.finished_at,
       coalesce(a.agent_name, ''), coalesce(a.lease, 0)
FROM jobs j
LEFT JOIN active_jobs a ON a.job_id = j.id
WHERE j.id = $1;
