-- tether schema v11: expires_at is computed by the statements that end a
-- job (attempt_end*, job_cancel_queued) and cleared by the one that brings a
-- finished job back (requeue), instead of by a row trigger that ran on every
-- status change — three times per job on the hot path (claim, running, end).
-- tether_expiry is the rule the trigger applied, as an inlinable SQL
-- function of the status being stored.
CREATE FUNCTION tether_expiry(status text, finished timestamptz, ttl_succeeded interval, ttl_failed interval)
RETURNS timestamptz LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN finished IS NULL THEN NULL
        WHEN status = 'succeeded' AND ttl_succeeded > interval '0' THEN finished + ttl_succeeded
        WHEN status IN ('failed', 'canceled') AND ttl_failed > interval '0' THEN finished + ttl_failed
    END
$$;

DROP TRIGGER jobs_expires_at ON jobs;
DROP FUNCTION tether_jobs_expires_at();
