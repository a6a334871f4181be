-- Lock order: the active row first, then the job.
SELECT j.status, a.agent_name IS NOT NULL
FROM jobs j
LEFT JOIN active_jobs a ON a.job_id = j.id
WHERE j.id = $1
FOR UPDATE OF j;
