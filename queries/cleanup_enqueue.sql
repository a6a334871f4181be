-- Queue a Cleanup for a job whose terminal status is committed (or commits in
-- the same transaction). A Cleanup already pending for the job is kept.
INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason)
SELECT id, plugin, command, context, attempt, $2 FROM jobs WHERE id = $1
ON CONFLICT (job_id) DO NOTHING;
