-- What the database says now about jobs an agent holds or recently ended,
-- read after its history changed (internal/claim's reconcile): the job's
-- status and attempt, and its active row (holder, lease, the highest log
-- record stored under that lease, the handle). A job missing from the
-- answer is not in the database at all.
SELECT j.id, j.status, j.attempt,
       a.job_id IS NOT NULL,
       coalesce(a.agent_name, ''), coalesce(a.agent_generation, ''), coalesce(a.lease, 0),
       CASE WHEN a.log_lease = a.lease THEN a.log_seq ELSE 0 END,
       a.handle
FROM jobs j
LEFT JOIN active_jobs a ON a.job_id = j.id
WHERE j.id = ANY (@ids::text[]);
