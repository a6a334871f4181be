-- The status of a job whose lease is still (job_id, lease); no row if lost.
SELECT j.status
FROM active_jobs a JOIN jobs j ON j.id = a.job_id
WHERE a.job_id = $1 AND a.lease = $2;
