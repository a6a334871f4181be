-- Give a holder back the claim the database lost with its history (a
-- failover to a standby that never received it): the agent still runs
-- the attempt, and the database shows the job unowned, under an older
-- lease, in the same attempt, not ended. The lease the holder had is above
-- every lease of the job the database has handed out since (the row is
-- unowned and its lease below), so restoring it hands nothing out twice.
-- The job is accepted, or running when the plugin was called (@running).
-- Like a claim, the claim and running events the jobs row held before
-- become event rows, and the row holds this claim's (claim.sql).
WITH a AS (
    SELECT a.job_id
    FROM active_jobs a
    JOIN jobs j ON j.id = a.job_id
    WHERE a.job_id = @job AND a.agent_name IS NULL AND a.lease < @lease
      AND j.attempt = @attempt AND j.status IN ('queued', 'accepted', 'running')
    FOR UPDATE OF a
), prev AS (
    INSERT INTO job_events (id, job_id, at, kind, agent, generation, lease, message)
    SELECT x.id, o.id, x.at, x.kind, o.claim_agent, o.claim_generation, o.claim_lease, x.message
    FROM jobs o
    CROSS JOIN LATERAL (VALUES (o.claim_event_id, o.claim_at, 'claimed', o.claim_message),
                               (o.running_event_id, o.running_at, 'running', o.running_message)) x(id, at, kind, message)
    WHERE o.id IN (SELECT job_id FROM a) AND o.claim_event_id IS NOT NULL AND x.id IS NOT NULL
), j AS (
    UPDATE jobs
    SET status = CASE WHEN @running::boolean THEN 'running' ELSE 'accepted' END,
        started_at = CASE WHEN @running::boolean THEN coalesce(started_at, now()) ELSE started_at END,
        attempt_started_at = CASE WHEN @running::boolean THEN coalesce(attempt_started_at, now()) ELSE attempt_started_at END,
        updated_at = now(),
        claim_event_id = nextval('job_events_id_seq'), claim_at = now(),
        claim_agent = @agent, claim_generation = @generation, claim_lease = @lease,
        claim_message = 'attempt ' || attempt || ' (re-asserted: the database had lost this claim)',
        running_event_id = CASE WHEN @running::boolean THEN nextval('job_events_id_seq') END,
        running_at = CASE WHEN @running::boolean THEN now() END,
        running_message = CASE WHEN @running::boolean THEN 'attempt ' || attempt || ' on ' || @agent || ' (re-asserted)' END
    WHERE id IN (SELECT job_id FROM a)
    RETURNING id
)
UPDATE active_jobs
SET agent_name = @agent, agent_generation = @generation, lease = @lease,
    last_heartbeat = now(), claimed_at = now(), detached = false,
    released_at = NULL, release_reason = NULL
WHERE job_id IN (SELECT id FROM j)
RETURNING job_id;
