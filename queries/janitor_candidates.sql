-- One janitor batch: lock up to @batch active rows that need the janitor now,
-- with their job, their holder's agents row and what the live agents serve.
-- The janitor decides each in Go (janitor.Decide) and applies the decisions
-- in the same transaction; SKIP LOCKED lets every agent's janitor run side by
-- side, and the locks on active_jobs are held until commit.
--
-- Each part reads only the rows its rule can act on, through an index, so a
-- pass costs the same with or without a backlog of queued jobs (of any
-- command) and however many jobs have ended:
--   owned      held rows (active_jobs_agent) whose holder is gone, restarted,
--              stopped or silent, or that ran past active_timeout + grace;
--   canceling  unowned canceling jobs (jobs_indexed_status_id);
--   released   unowned running jobs released at least awol_timeout ago
--              (active_jobs_released);
--   pending    unowned queued jobs past pending_deadline (active_jobs_pending);
--   unserved   unowned queued jobs without a pending_timeout, due for at least
--              awol_timeout, of a command no live agent serves: those
--              commands first (from the agents rows and @self_commands), then
--              each one's oldest rows through active_jobs_claim.
--   dead_held  the rows of dead holders, in a liveness pass only (below).
-- The parts are disjoint (by holder, status, resume and pending_timeout), and
-- each is read only as far as the batch needs: the Append stops at @batch.
-- (A part's status check is a lookup by job_id, so the planner cannot turn
-- it into a scan of every job with that status.)
-- @skip: rows this pass already looked at and left alone.
--
-- A liveness pass (@dead_names non-empty, with @dead_generations and
-- @dead_since: when the checker first saw each one's name lock free) reads
-- only the dead part: the rows those holders hold, through
-- active_jobs_agent, for holders still silent since then (last_seen <=
-- dead_since; one that heartbeat again is not dead). Every other part is off
-- then, and the dead part is empty otherwise. "dead" marks each row of such a
-- holder for Decide, and a dead holder does not count among the live agents.
--
-- Mixed configurations (internal/fleet, Judge): a holder is judged by the
-- larger of this janitor's @stale_job and its own announced stale_job, and
-- its accepted jobs by the larger of @offline_after and 3 × its announced
-- keepalive (NULL, an agent older than v15: this janitor's own; greatest
-- ignores NULL). The owned part reads by the same bounds that Decide
-- applies to the announced timings returned in the last three columns.
--
-- "Live" agent: state 'running' (not draining, not stopped) and last_seen
-- within the larger of @stale_job and its own stale_job, and not found dead
-- by the liveness check (agents.lock_found_dead, silent since), or this
-- process itself. served/loaded/resumable: a live agent serves the job's
-- command (agents.commands) / one of those has the job's plugin / one of
-- those's copy of it declares resume. self_registered: this process
-- (@self_name, @self_generation) has its agents row, which then speaks for
-- it; without one, the caller counts what this process serves itself.
-- Durations are in seconds.
WITH dead AS MATERIALIZED (
    SELECT g.name, g.generation
    FROM unnest(@dead_names::text[], @dead_generations::text[], @dead_since::timestamptz[]) d (name, generation, since)
    JOIN agents g ON g.name = d.name AND g.generation = d.generation AND g.last_seen <= d.since
), live AS MATERIALIZED (
    -- This process is live whatever its last_seen says: it is running this
    -- statement. (After a database outage every last_seen is old until the
    -- heartbeats get through; a janitor that counted itself out then would
    -- fail resumable jobs it could resume.)
    SELECT l.commands, l.plugins
    FROM agents l
    WHERE l.state = 'running'
      AND (l.last_seen > now() - greatest(@stale_job::float8 * interval '1 second', l.stale_job)
           OR (l.name = @self_name AND l.generation = @self_generation))
      AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.name = l.name AND d.generation = l.generation)
      -- Found dead by the liveness check and silent since (internal/fleet.Classify).
      AND NOT (l.lock_found_dead AND l.last_seen <= l.lock_free_since)
), me AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM agents WHERE name = @self_name AND generation = @self_generation) AS registered
), unserved AS MATERIALIZED (
    -- Commands no running agent has served for awol_timeout: not merely
    -- silent for stale_job, so a database restart (every last_seen old
    -- until the heartbeats get through) never fails a backlog.
    SELECT k.command
    FROM (SELECT unnest(commands) FROM agents UNION SELECT unnest(@self_commands::text[])) k (command)
    WHERE NOT EXISTS (SELECT 1 FROM agents l
                      WHERE k.command = ANY (l.commands) AND l.state = 'running'
                        AND (l.last_seen > now() - @awol_timeout::float8 * interval '1 second'
                             OR (l.name = @self_name AND l.generation = @self_generation)))
      AND NOT (k.command = ANY (@self_commands::text[]) AND NOT (SELECT registered FROM me))
)
SELECT x.job_id, j.status, j.plugin, x.command, j.started_at IS NOT NULL,
       coalesce(x.agent_name, ''), coalesce(x.agent_generation, ''), x.lease,
       extract(epoch FROM now() - x.heard)::float8,
       x.released_at IS NOT NULL,
       coalesce(extract(epoch FROM now() - x.released_at), 0)::float8,
       g.name IS NOT NULL, coalesce(g.generation, ''), coalesce(g.state, ''),
       coalesce(extract(epoch FROM now() - g.last_seen), 0)::float8,
       EXISTS (SELECT 1 FROM live l WHERE x.command = ANY (l.commands)),
       EXISTS (SELECT 1 FROM live l WHERE x.command = ANY (l.commands) AND l.plugins ? j.plugin),
       EXISTS (SELECT 1 FROM live l WHERE x.command = ANY (l.commands)
                 AND l.plugins -> j.plugin -> 'capabilities' ? 'resume'),
       extract(epoch FROM j.pending_timeout)::float8,
       CASE WHEN isfinite(x.run_after) THEN extract(epoch FROM now() - x.run_after)::float8 ELSE 0 END,
       extract(epoch FROM j.active_timeout)::float8,
       coalesce(extract(epoch FROM now() - j.attempt_started_at), 0)::float8,
       (SELECT registered FROM me),
       EXISTS (SELECT 1 FROM dead d WHERE d.name = x.agent_name AND d.generation = x.agent_generation),
       coalesce(extract(epoch FROM g.keepalive), 0)::float8,
       coalesce(extract(epoch FROM g.dead_after), 0)::float8,
       coalesce(extract(epoch FROM g.stale_job), 0)::float8
FROM (
    SELECT * FROM (
        SELECT a.job_id, a.command, a.agent_name, a.agent_generation, a.lease,
               h.heard, a.released_at, a.run_after
        FROM active_jobs a
        -- One lookup per held row (OFFSET 0 keeps it one): never a scan of jobs.
        CROSS JOIN LATERAL (
            SELECT j.status, j.started_at, j.active_timeout, j.attempt_started_at
            FROM jobs j WHERE j.id = a.job_id OFFSET 0
        ) j
        LEFT JOIN agents g ON g.name = a.agent_name
        -- When the holder was last heard for this lease: its generation's
        -- heartbeats (agents.last_seen) renew every lease it holds and has
        -- not detached (heartbeat.sql); otherwise the lease's own
        -- last_heartbeat, set at claim.
        CROSS JOIN LATERAL (
            SELECT CASE WHEN NOT a.detached AND g.generation = a.agent_generation
                        THEN greatest(coalesce(a.last_heartbeat, a.claimed_at, 'epoch'), g.last_seen)
                        ELSE coalesce(a.last_heartbeat, a.claimed_at, 'epoch') END AS heard
        ) h
        WHERE a.agent_name IS NOT NULL
          AND a.job_id <> ALL (@skip::text[])
          AND cardinality(@dead_names::text[]) = 0
          AND (   g.name IS NULL
               OR g.generation IS DISTINCT FROM a.agent_generation
               OR g.state = 'stopped'
               OR h.heard <= now() - greatest(@stale_job::float8 * interval '1 second', g.stale_job)
               OR (h.heard <= now() - greatest(@offline_after::float8 * interval '1 second', 3 * g.keepalive)
                   AND (j.status IN ('queued', 'accepted') OR (j.status = 'canceling' AND j.started_at IS NULL)))
               -- active_timeout backup for an owner that did not enforce it.
               OR (j.status = 'running' AND j.active_timeout > interval '0'
                   AND j.attempt_started_at <= now() - j.active_timeout - @active_grace::float8 * interval '1 second'))
        LIMIT @batch
        FOR UPDATE OF a SKIP LOCKED
    ) owned
    UNION ALL
    SELECT * FROM (
        SELECT a.job_id, a.command, a.agent_name, a.agent_generation, a.lease,
               coalesce(a.last_heartbeat, a.claimed_at, 'epoch'), a.released_at, a.run_after
        FROM jobs j
        JOIN active_jobs a ON a.job_id = j.id
        WHERE j.indexed_status = 'canceling' AND a.agent_name IS NULL
          AND a.job_id <> ALL (@skip::text[])
          AND cardinality(@dead_names::text[]) = 0
        LIMIT @batch
        FOR UPDATE OF a SKIP LOCKED
    ) canceling
    UNION ALL
    SELECT * FROM (
        SELECT a.job_id, a.command, a.agent_name, a.agent_generation, a.lease,
               coalesce(a.last_heartbeat, a.claimed_at, 'epoch'), a.released_at, a.run_after
        FROM active_jobs a
        WHERE a.agent_name IS NULL AND a.resume
          AND (SELECT j.status FROM jobs j WHERE j.id = a.job_id) = 'running'
          AND a.released_at <= now() - @awol_timeout::float8 * interval '1 second'
          AND a.job_id <> ALL (@skip::text[])
          AND cardinality(@dead_names::text[]) = 0
        ORDER BY a.released_at
        LIMIT @batch
        FOR UPDATE OF a SKIP LOCKED
    ) released
    UNION ALL
    SELECT * FROM (
        SELECT a.job_id, a.command, a.agent_name, a.agent_generation, a.lease,
               coalesce(a.last_heartbeat, a.claimed_at, 'epoch'), a.released_at, a.run_after
        FROM active_jobs a
        WHERE a.agent_name IS NULL AND a.pending_deadline IS NOT NULL AND a.pending_deadline <= now()
          AND (SELECT j.status FROM jobs j WHERE j.id = a.job_id) = 'queued'
          AND a.job_id <> ALL (@skip::text[])
          AND cardinality(@dead_names::text[]) = 0
        ORDER BY a.pending_deadline
        LIMIT @batch
        FOR UPDATE OF a SKIP LOCKED
    ) pending
    UNION ALL
    SELECT p.* FROM unserved u
    CROSS JOIN LATERAL (
        SELECT a.job_id, a.command, a.agent_name, a.agent_generation, a.lease,
               coalesce(a.last_heartbeat, a.claimed_at, 'epoch'), a.released_at, a.run_after
        FROM active_jobs a
        WHERE a.agent_name IS NULL AND a.command = u.command
          AND a.run_after <= now() - @awol_timeout::float8 * interval '1 second'
          AND NOT a.resume AND a.pending_timeout = interval '0'
          AND (SELECT j.status FROM jobs j WHERE j.id = a.job_id) = 'queued'
          AND a.job_id <> ALL (@skip::text[])
          AND cardinality(@dead_names::text[]) = 0
        ORDER BY a.run_after, a.job_id
        LIMIT @batch
        FOR UPDATE OF a SKIP LOCKED
    ) p
    UNION ALL
    SELECT * FROM (
        SELECT a.job_id, a.command, a.agent_name, a.agent_generation, a.lease,
               CASE WHEN a.detached THEN coalesce(a.last_heartbeat, a.claimed_at, 'epoch')
                    ELSE greatest(coalesce(a.last_heartbeat, a.claimed_at, 'epoch'), g.last_seen) END,
               a.released_at, a.run_after
        FROM dead d
        JOIN agents g ON g.name = d.name AND g.generation = d.generation
        JOIN active_jobs a ON a.agent_name = d.name AND a.agent_generation = d.generation
        WHERE a.job_id <> ALL (@skip::text[])
        LIMIT @batch
        FOR UPDATE OF a SKIP LOCKED
    ) dead_held
    LIMIT @batch
) x
JOIN jobs j ON j.id = x.job_id
LEFT JOIN agents g ON g.name = x.agent_name;
