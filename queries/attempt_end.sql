-- The one transition that ends an attempt, for every caller: the agent that
-- holds the job, its writes deferred through a database outage, drain, and
-- the janitor (in its transaction). Go decides (internal/lifecycle); this
-- stores the decision, fenced by (job_id, lease) and, for the janitor, the
-- status it decided on. Zero rows written = the fence did not hold.
--
--   final  (not @retry): the terminal status, result, error and final
--          event; the active row goes and jobs.last_lease keeps @lease + 1,
--          above every lease ever handed out (a requeue starts above it).
--   retry  (@retry):     queued again as attempt + 1, its active row
--          claimable (holder cleared, lease + 1, handle cleared) after
--          @wait_s seconds, and a retry_scheduled event.
--   cancel wins: a retry of a job whose cancel was requested (canceling)
--          is stored as canceled instead — a retry never undoes a cancel.
--   @cleanup: the plugin's Cleanup is due; its cleanups row is written here,
--          in the same statement as the outcome, so remote work is never
--          forgotten. With @cleanup_by it is already claimed by that agent
--          for @cleanup_hold_s (it runs the Cleanup itself; if it dies, the
--          claim lapses and any janitor runs it). A retry then waits for it
--          (run_after = 'infinity' until cleanup_done lifts it to retry_at).
WITH cur AS (
    SELECT a.job_id, j.attempt, j.status AS was, j.plugin, j.command, j.context
    FROM active_jobs a JOIN jobs j ON j.id = a.job_id
    WHERE a.job_id = @job AND a.lease = @lease
      AND (@expect::text = '' OR j.status = @expect::text)
    FOR UPDATE OF a
), d AS (
    SELECT cur.*,
           @retry::boolean AND cur.was <> 'canceling' AS retry,
           @retry::boolean AND cur.was = 'canceling' AS cancel_won
    FROM cur
), fin AS (
    UPDATE jobs j
    SET status = CASE WHEN d.cancel_won THEN 'canceled' ELSE @status::text END,
        result = @result::jsonb,
        error = CASE WHEN d.cancel_won THEN 'canceled by request; the attempt had failed: ' || coalesce(@error::text, '')
                     ELSE @error::text END,
        error_class = CASE WHEN d.cancel_won THEN NULL ELSE @error_class::text END,
        finished_at = now(), updated_at = now(), last_lease = @lease::bigint + 1
    FROM d
    WHERE j.id = d.job_id AND NOT d.retry
    RETURNING j.id, j.status, j.error, d.cancel_won
), rj AS (
    UPDATE jobs j
    SET status = 'queued', attempt = j.attempt + 1, result = NULL,
        error = @error::text, error_class = @error_class::text,
        attempt_started_at = NULL, finished_at = NULL, updated_at = now()
    FROM d
    WHERE j.id = d.job_id AND d.retry
    RETURNING j.id, j.attempt, j.command
), ra AS (
    UPDATE active_jobs a
    SET agent_name = NULL, agent_generation = NULL, lease = a.lease + 1, handle = NULL, resume = false,
        last_heartbeat = NULL, claimed_at = NULL, released_at = NULL, release_reason = NULL,
        run_after = CASE WHEN @cleanup::boolean THEN 'infinity'
                         ELSE now() + @wait_s::float8 * interval '1 second' END
    FROM rj
    WHERE a.job_id = rj.id
    RETURNING a.job_id, a.lease, a.run_after
), gone AS (
    DELETE FROM active_jobs WHERE job_id IN (SELECT id FROM fin)
), c AS (
    INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason, retry_at,
                          claimed_by, claimed_until, attempts)
    SELECT d.job_id, d.plugin, d.command, d.context, d.attempt, coalesce(@error::text, ''),
           CASE WHEN d.retry THEN now() + @wait_s::float8 * interval '1 second' END,
           nullif(@cleanup_by::text, ''),
           CASE WHEN @cleanup_by::text <> '' THEN now() + @cleanup_hold_s::float8 * interval '1 second' END,
           CASE WHEN @cleanup_by::text <> '' THEN 1 ELSE 0 END
    FROM d
    WHERE @cleanup::boolean
    ON CONFLICT (job_id) DO UPDATE
    -- A Cleanup still queued for the job (rare: a gate lifted by hand) is
    -- kept with its claim; it now covers this attempt too.
    SET attempt = excluded.attempt, reason = excluded.reason, retry_at = excluded.retry_at,
        next_at = least(cleanups.next_at, now())
    RETURNING claimed_by, attempts
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT id, CASE WHEN cancel_won THEN 'canceled' ELSE @event_kind::text END,
           @agent::text, @generation::text, @event_lease::bigint,
           CASE WHEN cancel_won THEN error ELSE @message::text END
    FROM fin
    UNION ALL
    SELECT rj.id, 'retry_scheduled', @agent::text, @generation::text, ra.lease,
           'attempt ' || rj.attempt ||
           CASE WHEN @cleanup::boolean
                THEN ' after Cleanup, not before ' || to_char((now() + @wait_s::float8 * interval '1 second') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                ELSE ' at ' || to_char(ra.run_after AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
           || ': ' || coalesce(@error::text, '')
    FROM rj JOIN ra ON ra.job_id = rj.id
), n AS (
    SELECT pg_notify('tether_jobs', command) FROM rj WHERE NOT @cleanup::boolean
)
SELECT (SELECT count(*) FROM fin) + (SELECT count(*) FROM rj),
       EXISTS (SELECT 1 FROM rj),
       coalesce((SELECT status FROM fin), 'queued'),
       coalesce((SELECT attempt FROM rj), (SELECT attempt FROM d), 0),
       (SELECT run_after FROM ra WHERE isfinite(run_after)),
       coalesce((SELECT claimed_by FROM c), ''),
       coalesce((SELECT attempts FROM c), 0)
FROM (SELECT count(*) FROM n) x;
