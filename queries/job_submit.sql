-- Insert a queued job with its claimable active row and a submitted event, and
-- wake idle agents. Returns nothing when the submitter ($5) already used the
-- idempotency key ($6).
-- $8..$14 are the resolved limits stamped on the job: max_retry, then
-- retry_backoff, retry_backoff_max, pending_timeout, active_timeout,
-- ttl_succeeded, ttl_failed in seconds.
WITH j AS (
    INSERT INTO jobs (id, command, plugin, status, context, submitter, idempotency_key, request_hash,
                      max_retry, retry_backoff, retry_backoff_max, pending_timeout, active_timeout,
                      ttl_succeeded, ttl_failed)
    VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7,
            $8, $9::float8 * interval '1 second', $10::float8 * interval '1 second',
            $11::float8 * interval '1 second', $12::float8 * interval '1 second',
            $13::float8 * interval '1 second', $14::float8 * interval '1 second')
    ON CONFLICT (submitter, idempotency_key) DO NOTHING
    RETURNING id, command, plugin, submitter, pending_timeout
), a AS (
    INSERT INTO active_jobs (job_id, command, plugin, pending_timeout)
    SELECT id, command, plugin, pending_timeout FROM j
), e AS (
    INSERT INTO job_events (job_id, kind, message)
    SELECT id, 'submitted', CASE WHEN submitter = '' THEN '' ELSE 'by ' || submitter END FROM j
)
SELECT j.id FROM j, LATERAL (SELECT pg_notify('tether_jobs', j.command)) n;
