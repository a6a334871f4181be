-- Fenced: store the plugin's resumable handle.
UPDATE active_jobs SET handle = $3 WHERE job_id = $1 AND lease = $2;
