-- Claim up to @limit claimable jobs of the commands this agent runs
-- (@commands). SKIP LOCKED lets agents claim side by side; the lease bump
-- fences out any earlier holder. A queued job becomes accepted; a released
-- running job stays running (the agent resumes it).
--
-- picked: per command, the oldest due unowned rows, read in order from
-- active_jobs_claim (command, run_after, job_id) and locked as they are read,
-- so a claim never reads another command's rows, however large its backlog;
-- then the oldest @limit of those. A row that must be resumed (resume) is
-- taken only if its plugin is in @resumable (the plugins this agent can
-- Resume with); @any_plugin waives that check.
--
-- j then claims the job row first: its status is re-checked under its lock
-- (a cancel that committed meanwhile makes it canceling, and the row is not
-- taken), and only the jobs it updated give their active row a holder. Locks:
-- active rows (picked), then their job rows (j), as everywhere else.
--
-- Run with the generic plan (store.queryGeneric): PostgreSQL re-planned this
-- statement on every call otherwise (0.6 ms of planning per claim, measured,
-- more than its execution). Rows are matched through ANY (ARRAY(...)) so the
-- generic plan reads jobs and active_jobs by primary key instead of hashing
-- whole tables, whatever LIMIT it assumes.
WITH picked AS (
    SELECT p.job_id, p.run_after, p.released_at, p.lease
    FROM (SELECT DISTINCT unnest(@commands::text[]) AS command) c
    CROSS JOIN LATERAL (
        SELECT a.job_id, a.run_after, a.released_at, a.lease
        FROM active_jobs a
        WHERE a.agent_name IS NULL
          AND a.command = c.command
          AND a.run_after <= now()
          AND (NOT a.resume OR @any_plugin::boolean OR a.plugin = ANY(@resumable::text[]))
        ORDER BY a.run_after, a.job_id
        LIMIT @limit
        FOR UPDATE OF a SKIP LOCKED
    ) p
    ORDER BY p.run_after, p.job_id
    LIMIT @limit
), j AS (
    -- Only queued or released running jobs; an unowned canceling job is the
    -- janitor's. (Filtering here, on the picked rows only, and not in the
    -- locking scan: a join there halved claim throughput.)
    -- The claim's event is this row's claim_* columns (schema v13): its id
    -- from the events' sequence now, so the timeline keeps its order.
    UPDATE jobs
    SET status = CASE WHEN jobs.status = 'queued' THEN 'accepted' ELSE jobs.status END,
        updated_at = now(),
        claim_event_id = nextval('job_events_id_seq'), claim_at = now(),
        claim_agent = @agent, claim_generation = @generation, claim_lease = picked.lease + 1,
        claim_message = 'attempt ' || jobs.attempt,
        running_event_id = NULL, running_at = NULL, running_message = NULL
    FROM picked
    WHERE jobs.id = ANY (ARRAY(SELECT job_id FROM picked)) AND jobs.id = picked.job_id
      AND jobs.status IN ('queued', 'running')
    RETURNING jobs.id, jobs.command, jobs.plugin, jobs.status, jobs.context, jobs.attempt,
              jobs.max_retry,
              extract(epoch FROM jobs.retry_backoff)::float8 AS retry_backoff,
              extract(epoch FROM jobs.retry_backoff_max)::float8 AS retry_backoff_max,
              extract(epoch FROM jobs.pending_timeout)::float8 AS pending_timeout,
              extract(epoch FROM jobs.active_timeout)::float8 AS active_timeout,
              extract(epoch FROM jobs.ttl_succeeded)::float8 AS ttl_succeeded,
              extract(epoch FROM jobs.ttl_failed)::float8 AS ttl_failed,
              coalesce(extract(epoch FROM now() - jobs.attempt_started_at), 0)::float8 AS attempt_age,
              -- For the metrics: how long it was due (a released job since
              -- its release; greatest skips NULL), and since submit.
              greatest(extract(epoch FROM now() - greatest(picked.run_after, picked.released_at)), 0)::float8 AS queue_wait,
              extract(epoch FROM now() - jobs.created_at)::float8 AS job_age
), claimed AS (
    UPDATE active_jobs a
    SET agent_name = @agent, agent_generation = @generation, lease = a.lease + 1,
        last_heartbeat = now(), claimed_at = now(), detached = false
    WHERE a.job_id = ANY (ARRAY(SELECT id FROM j))
    RETURNING a.job_id, a.lease, a.handle
), prev AS (
    -- The claim these columns held before (an earlier attempt, or the lease
    -- this one resumes) becomes event rows, with the ids it was given. The
    -- statement's snapshot shows the row as it was: its last writers (the
    -- earlier claim and running write) held the active row, released before
    -- this claim could see it claimable.
    INSERT INTO job_events (id, job_id, at, kind, agent, generation, lease, message)
    SELECT x.id, o.id, x.at, x.kind, o.claim_agent, o.claim_generation, o.claim_lease, x.message
    FROM jobs o
    CROSS JOIN LATERAL (VALUES (o.claim_event_id, o.claim_at, 'claimed', o.claim_message),
                               (o.running_event_id, o.running_at, 'running', o.running_message)) x(id, at, kind, message)
    WHERE o.id = ANY (ARRAY(SELECT id FROM j)) AND o.claim_event_id IS NOT NULL AND x.id IS NOT NULL
)
SELECT j.id, j.command, j.plugin, j.status, j.context, j.attempt, c.lease, c.handle,
       j.max_retry, j.retry_backoff, j.retry_backoff_max, j.pending_timeout, j.active_timeout,
       j.ttl_succeeded, j.ttl_failed, j.attempt_age, j.queue_wait, j.job_age
FROM j JOIN claimed c ON c.job_id = j.id;
