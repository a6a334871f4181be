-- A heartbeat found this lease held by the process's generation in the
-- database but not in the process (on two heartbeats in a row): stop
-- covering it with the agents row, so the janitor's rules run on the lease's
-- own last_heartbeat (its claim time). Fenced by holder and lease.
UPDATE active_jobs SET detached = true
WHERE job_id = @job_id AND lease = @lease
  AND agent_name = @name AND agent_generation = @generation;
