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
WITH f AS (
    SELECT job_id, handle FROM active_jobs
    WHERE job_id = @job AND lease = @lease
      AND (@holder::text = '' OR agent_generation = @holder::text) -- the holder's own end (see log_append.sql)
    FOR UPDATE
), j AS (
    -- One UPDATE for both endings (final or retry), deciding per row in the
    -- SET list from the job's status before it: cheaper than one statement
    -- node per branch. A retry of a canceling job is the cancel.
    UPDATE jobs j
    SET status = CASE WHEN NOT @retry::boolean THEN @status::text
                      WHEN j.status = 'canceling' THEN 'canceled' ELSE 'queued' END,
        attempt = CASE WHEN @retry::boolean AND j.status <> 'canceling' THEN j.attempt + 1 ELSE j.attempt END,
        result = CASE WHEN @retry::boolean THEN NULL ELSE @result::jsonb END,
        error = CASE WHEN @retry::boolean AND j.status = 'canceling'
                     THEN 'canceled by request; the attempt had failed: ' || coalesce(@error::text, '')
                     ELSE @error::text END,
        error_class = CASE WHEN @retry::boolean AND j.status = 'canceling' THEN NULL ELSE @error_class::text END,
        attempt_started_at = CASE WHEN @retry::boolean AND j.status <> 'canceling' THEN NULL ELSE j.attempt_started_at END,
        finished_at = CASE WHEN @retry::boolean AND j.status <> 'canceling' THEN NULL ELSE now() END,
        updated_at = now(),
        last_lease = CASE WHEN @retry::boolean AND j.status <> 'canceling' THEN j.last_lease ELSE @lease::bigint + 1 END,
        -- The status stored (as above) decides the expiry; a retry has none.
        expires_at = CASE WHEN @retry::boolean AND j.status <> 'canceling' THEN NULL
                          ELSE tether_expiry(CASE WHEN @retry::boolean THEN 'canceled' ELSE @status::text END,
                                             now(), j.ttl_succeeded, j.ttl_failed) END
    FROM f
    WHERE j.id = f.job_id AND (@expect::text = '' OR j.status = @expect::text)
    RETURNING j.id, j.status, j.attempt, j.error, j.command, j.status = 'queued' AS retry,
              @retry::boolean AND j.status = 'canceled' AS cancel_won
), ra AS (
    UPDATE active_jobs a
    SET agent_name = NULL, agent_generation = NULL, lease = a.lease + 1, handle = NULL, resume = false,
        last_heartbeat = NULL, claimed_at = NULL, released_at = NULL, release_reason = NULL,
        run_after = CASE WHEN @cleanup::boolean THEN 'infinity'
                         ELSE now() + @wait_s::float8 * interval '1 second' END
    FROM j
    WHERE a.job_id = j.id AND j.retry
    RETURNING a.job_id, a.lease, a.run_after
), gone AS (
    DELETE FROM active_jobs WHERE job_id IN (SELECT id FROM j WHERE NOT retry)
), c AS (
    -- plugin, command and context from the job as it was (they never
    -- change); the attempt that left the remote work.
    INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason, retry_at,
                          claimed_by, claimed_until, attempts, handle)
    SELECT j.id, o.plugin, o.command, o.context, CASE WHEN j.retry THEN j.attempt - 1 ELSE j.attempt END,
           coalesce(@error::text, ''),
           CASE WHEN j.retry THEN now() + @wait_s::float8 * interval '1 second' END,
           nullif(@cleanup_by::text, ''),
           CASE WHEN @cleanup_by::text <> '' THEN now() + @cleanup_hold_s::float8 * interval '1 second' END,
           CASE WHEN @cleanup_by::text <> '' THEN 1 ELSE 0 END,
           f.handle
    FROM j JOIN jobs o ON o.id = j.id JOIN f ON f.job_id = j.id
    WHERE @cleanup::boolean
    ON CONFLICT (job_id) DO UPDATE
    -- A Cleanup still queued for the job (rare: a gate lifted by hand) is
    -- kept with its claim; it now covers this attempt too.
    SET attempt = excluded.attempt, reason = excluded.reason, retry_at = excluded.retry_at,
        next_at = least(cleanups.next_at, now()), handle = coalesce(excluded.handle, cleanups.handle)
    RETURNING claimed_by, attempts
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT id, CASE WHEN cancel_won THEN 'canceled' ELSE @event_kind::text END,
           @agent::text, @generation::text, @event_lease::bigint,
           CASE WHEN cancel_won THEN error ELSE @message::text END
    FROM j WHERE NOT retry
    UNION ALL
    SELECT j.id, 'retry_scheduled', @agent::text, @generation::text, ra.lease,
           'attempt ' || j.attempt ||
           CASE WHEN @cleanup::boolean
                THEN ' after Cleanup, not before ' || to_char((now() + @wait_s::float8 * interval '1 second') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                ELSE ' at ' || to_char(ra.run_after AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
           || ': ' || coalesce(@error::text, '')
    FROM j JOIN ra ON ra.job_id = j.id
), n AS (
    SELECT pg_notify('tether_jobs', command) FROM j WHERE retry AND NOT @cleanup::boolean
    UNION ALL
    -- Wakes the job's followers (logs and events): it ended.
    SELECT pg_notify('tether_job_end', id) FROM j
    WHERE NOT retry AND EXISTS (SELECT 1 FROM job_followers f WHERE f.job_id = j.id)
)
SELECT (SELECT count(*) FROM j),
       coalesce((SELECT retry FROM j), false),
       coalesce((SELECT status FROM j), ''),
       coalesce((SELECT attempt FROM j), 0),
       (SELECT run_after FROM ra WHERE isfinite(run_after)),
       coalesce((SELECT claimed_by FROM c), ''),
       coalesce((SELECT attempts FROM c), 0)
FROM (SELECT count(*) FROM n) x;
