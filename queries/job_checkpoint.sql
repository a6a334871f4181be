-- Fenced: store the plugin's resumable handle, by lease and (when
-- @generation is set) the holder's generation (see log_append.sql).
UPDATE active_jobs SET handle = @handle
WHERE job_id = @job_id AND lease = @lease
  AND (@generation::text = '' OR agent_generation = @generation::text);
