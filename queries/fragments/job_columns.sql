-- The columns of a job as store.scanJob reads them, in its order. job_get,
-- job_list and job_list_live select them as {{job_columns}}, from jobs j
-- and its active_jobs row a.
j.id, j.command, j.plugin, j.status, j.context, j.attempt,
       coalesce(j.error, ''), coalesce(j.error_class, ''), j.result,
       j.submitter, coalesce(j.idempotency_key, ''),
       j.created_at, j.updated_at, j.started_at, j.finished_at,
       coalesce(a.agent_name, ''), coalesce(a.lease, 0),
       j.max_retry, extract(epoch FROM j.retry_backoff)::float8, extract(epoch FROM j.retry_backoff_max)::float8,
       extract(epoch FROM j.pending_timeout)::float8, extract(epoch FROM j.active_timeout)::float8,
       extract(epoch FROM j.ttl_succeeded)::float8, extract(epoch FROM j.ttl_failed)::float8,
       j.attempt_started_at, j.expires_at, CASE WHEN a.run_after > now() AND isfinite(a.run_after) THEN a.run_after END,
       coalesce(a.run_after = 'infinity', false)
