SELECT id, job_id, at, kind, coalesce(agent, ''), coalesce(generation, ''), coalesce(lease, 0), message
FROM job_events
WHERE job_id = $1 AND id > $2
ORDER BY id
LIMIT $3;
