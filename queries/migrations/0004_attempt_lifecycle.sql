-- tether schema v4: one attempt lifecycle.
--
-- Leases are monotonic per job forever. The active row carries the lease
-- while the job is not terminal; when the row goes (the job ended), the last
-- lease value is kept on jobs.last_lease, and an operator requeue recreates
-- the active row above it. No lease value is ever handed out twice, so a
-- stalled holder of attempt 1 can never write onto attempt 2.
ALTER TABLE jobs ADD COLUMN last_lease bigint NOT NULL DEFAULT 0;

-- Finished jobs from before this version: their events name the highest
-- lease any holder had.
UPDATE jobs j SET last_lease = e.m
FROM (SELECT job_id, max(lease) AS m FROM job_events WHERE lease IS NOT NULL GROUP BY job_id) e
WHERE e.job_id = j.id AND j.status IN ('succeeded', 'failed', 'canceled');

-- The claim filters on these in its locking scan, without a join:
--   plugin: copied from jobs (immutable), so an agent claims a job that must
--           be resumed only if its own copy of the plugin can Resume;
--   resume: the job is running and was released: the next holder resumes it.
ALTER TABLE active_jobs
    ADD COLUMN plugin text NOT NULL DEFAULT '',
    ADD COLUMN resume boolean NOT NULL DEFAULT false,
    -- pending_timeout copied from jobs, and when an unclaimed job fails for
    -- it: run_after + pending_timeout, kept by the trigger below whenever
    -- run_after changes, so the janitor finds overdue rows by index.
    ADD COLUMN pending_timeout interval NOT NULL DEFAULT '0s',
    ADD COLUMN pending_deadline timestamptz;

UPDATE active_jobs a
SET plugin = j.plugin,
    resume = (j.status = 'running' AND a.agent_name IS NULL),
    pending_timeout = j.pending_timeout
FROM jobs j WHERE j.id = a.job_id;

CREATE FUNCTION tether_active_pending_deadline() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.pending_deadline := CASE
        WHEN NEW.pending_timeout > interval '0' AND isfinite(NEW.run_after) THEN NEW.run_after + NEW.pending_timeout
    END;
    RETURN NEW;
END
$$;

-- Column-specific: the claim and the heartbeat (which never set run_after)
-- do not fire it.
CREATE TRIGGER active_jobs_pending_deadline
    BEFORE INSERT OR UPDATE OF run_after, pending_timeout ON active_jobs
    FOR EACH ROW EXECUTE FUNCTION tether_active_pending_deadline();

UPDATE active_jobs SET run_after = run_after;

-- Claim: unowned rows of one command in run_after order. Leading with
-- command makes a claim independent of other commands' backlog.
DROP INDEX active_jobs_claimable;
CREATE INDEX active_jobs_claim ON active_jobs (command, run_after, job_id) WHERE agent_name IS NULL;
-- Janitor: unclaimed rows past their pending_timeout; released rows waiting
-- to be resumed; retries waiting for a Cleanup.
CREATE INDEX active_jobs_pending ON active_jobs (pending_deadline) WHERE agent_name IS NULL AND pending_deadline IS NOT NULL;
CREATE INDEX active_jobs_released ON active_jobs (released_at) WHERE agent_name IS NULL AND resume;
CREATE INDEX active_jobs_gated ON active_jobs (job_id) WHERE run_after = 'infinity';
-- Unowned canceling jobs are found through jobs_status_id.

-- Agents that stopped (or went silent) long ago and hold nothing are pruned.
CREATE INDEX agents_last_seen ON agents (last_seen);
