-- The highest output record number the database holds for a job's lease
-- (0: none under this lease). No row: the lease (or, when @generation is
-- set, the holder's generation) no longer holds. A resumable runner's
-- checkpoint and end carry the number it saw acknowledged; a database
-- that now holds fewer lost output with its history (see
-- store.ErrOutputGap), and the handle must not be stored past the gap.
SELECT CASE WHEN log_lease = lease THEN log_seq ELSE 0 END AS stored_seq
FROM active_jobs
WHERE job_id = @job_id AND lease = @lease
  AND (@generation::text = '' OR agent_generation = @generation::text);
