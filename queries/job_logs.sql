SELECT id, stream, at, data
FROM job_logs
WHERE job_id = $1 AND ($2 = '' OR stream = $2) AND id > $3
ORDER BY id
LIMIT $4;
