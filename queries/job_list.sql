-- Newest first; $4 is the keyset cursor (the last id of the previous page).
SELECT j.id, j.command, j.plugin, j.status, j.context, j.attempt,
       coalesce(j.error, ''), coalesce(j.error_class, ''), j.result,
       j.submitter, coalesce(j.idempotency_key, ''),
       j.created_at, j.updated_at, j.started_at, j.finished_at,
       coalesce(a.agent_name, ''), coalesce(a.lease, 0)
FROM jobs j
LEFT JOIN active_jobs a ON a.job_id = j.id
WHERE ($1 = '' OR j.status = $1)
  AND ($2 = '' OR j.command = $2)
  AND ($3 = '' OR j.submitter = $3)
  AND ($4 = '' OR j.id < $4)
ORDER BY j.id DESC
LIMIT $5;
