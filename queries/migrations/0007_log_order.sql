-- tether schema v7: job output is stored in write order across both streams
-- and stamped with the attempt that wrote it.
--
-- at is now the agent's clock when it received the bytes from the plugin
-- (no longer the database's at insert): a flush stores many writes at once,
-- and followers want each line's own time. attempt is the job's attempt at
-- the time; rows written before v7 have none (NULL, reported as 0).
ALTER TABLE job_logs ADD COLUMN attempt integer;

-- Both streams are read together, in id order, far more often than one.
CREATE INDEX job_logs_job_seq ON job_logs (job_id, id);
