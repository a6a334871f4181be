SELECT 1 FROM active_jobs WHERE job_id = $1 FOR UPDATE;
