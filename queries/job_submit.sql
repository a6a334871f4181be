-- Insert a queued job with its claimable active row and a submitted event, and
-- wake idle agents. Returns nothing when the idempotency key is already taken.
WITH j AS (
    INSERT INTO jobs (id, command, plugin, status, context, submitter, idempotency_key, request_hash)
    VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, command, submitter
), a AS (
    INSERT INTO active_jobs (job_id, command)
    SELECT id, command FROM j
), e AS (
    INSERT INTO job_events (job_id, kind, message)
    SELECT id, 'submitted', CASE WHEN submitter = '' THEN '' ELSE 'by ' || submitter END FROM j
)
SELECT j.id FROM j, LATERAL (SELECT pg_notify('tether_jobs', j.command)) n;
