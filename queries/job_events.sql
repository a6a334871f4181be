-- A job's timeline after event id $2 (job_timeline: its event rows and the
-- claimed/running events kept as columns of its row, schema v13).
SELECT id, job_id, at, kind, coalesce(agent, ''), coalesce(generation, ''), coalesce(lease, 0), message
FROM job_timeline
WHERE job_id = $1 AND id > $2
ORDER BY id
LIMIT $3;
