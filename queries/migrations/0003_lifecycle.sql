-- tether schema v3: job lifecycle levers, retention, operator requeue.
--
-- The limits a job runs under are stamped on its row at submit (resolved from
-- the global defaults, the command's limits and the request's overrides), so
-- editing a command changes only jobs submitted afterwards. Rows from before
-- this version get zero values: no retries, no timeouts, kept forever.

ALTER TABLE jobs
    ADD COLUMN max_retry          integer  NOT NULL DEFAULT 0 CHECK (max_retry >= 0),
    ADD COLUMN retry_backoff      interval NOT NULL DEFAULT '0s' CHECK (retry_backoff >= '0s'),
    ADD COLUMN retry_backoff_max  interval NOT NULL DEFAULT '0s' CHECK (retry_backoff_max >= '0s'),
    ADD COLUMN pending_timeout    interval NOT NULL DEFAULT '0s' CHECK (pending_timeout >= '0s'), -- 0 = off
    ADD COLUMN active_timeout     interval NOT NULL DEFAULT '0s' CHECK (active_timeout >= '0s'),  -- 0 = off
    ADD COLUMN ttl_succeeded      interval NOT NULL DEFAULT '0s' CHECK (ttl_succeeded >= '0s'),   -- 0 = keep forever
    ADD COLUMN ttl_failed         interval NOT NULL DEFAULT '0s' CHECK (ttl_failed >= '0s'),      -- failed and canceled; 0 = keep forever
    ADD COLUMN attempt_started_at timestamptz, -- when the plugin was first called for this attempt
    ADD COLUMN expires_at         timestamptz; -- retention: finished_at + the status's ttl; NULL = keep

-- expires_at follows status and finished_at on every write, whichever
-- statement makes the job terminal (or not terminal again), so retention
-- needs no knowledge of who finished the job.
CREATE FUNCTION tether_jobs_expires_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.expires_at := CASE
        WHEN NEW.finished_at IS NULL THEN NULL
        WHEN NEW.status = 'succeeded' AND NEW.ttl_succeeded > interval '0' THEN NEW.finished_at + NEW.ttl_succeeded
        WHEN NEW.status IN ('failed', 'canceled') AND NEW.ttl_failed > interval '0' THEN NEW.finished_at + NEW.ttl_failed
    END;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_expires_at
    BEFORE INSERT OR UPDATE OF status, finished_at, ttl_succeeded, ttl_failed ON jobs
    FOR EACH ROW EXECUTE FUNCTION tether_jobs_expires_at();

-- Retention reads only expired rows, oldest first, in small batches.
CREATE INDEX jobs_expires_at ON jobs (expires_at) WHERE expires_at IS NOT NULL;

-- A retry that must wait for its previous attempt's Cleanup: the job's active
-- row waits with run_after = 'infinity' and becomes claimable at retry_at (or
-- at once, if that passed) when the Cleanup is done.
ALTER TABLE cleanups ADD COLUMN retry_at timestamptz;

-- Operator requeues, idempotent on key: the first answer is kept and replayed.
CREATE TABLE requeue_requests (
    key          text PRIMARY KEY,
    job_id       text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    request_hash text        NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX requeue_requests_job ON requeue_requests (job_id);
