-- Queue a Cleanup for a job whose terminal status is committed (or commits in
-- the same transaction). A Cleanup already pending for the job is kept.
INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason, handle)
SELECT j.id, j.plugin, j.command, j.context, j.attempt, $2, a.handle
FROM jobs j LEFT JOIN active_jobs a ON a.job_id = j.id
WHERE j.id = $1
ON CONFLICT (job_id) DO NOTHING;
