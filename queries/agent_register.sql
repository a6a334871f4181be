-- Register this process under its name with a fresh generation, announcing
-- its commands, plugins and timings (schema v15: other agents judge it and
-- route submits by them). Returns the generation the name had before (''
-- for a new name). A drain request was for the process before: the new one
-- starts without it.
WITH prev AS (
    SELECT generation FROM agents WHERE name = @name
), up AS (
    INSERT INTO agents (name, generation, version, capacity, commands, plugins, command_specs,
                        keepalive, dead_after, stale_job, self_fence_after, state, started_at, last_seen)
    VALUES (@name, @generation, @version, @capacity, @commands, @plugins, @command_specs,
            @keepalive::float8 * interval '1 second', @dead_after::float8 * interval '1 second',
            @stale_job::float8 * interval '1 second', @self_fence_after::float8 * interval '1 second',
            'running', now(), now())
    ON CONFLICT (name) DO UPDATE
    SET generation = excluded.generation, version = excluded.version,
        capacity = excluded.capacity, commands = excluded.commands,
        plugins = excluded.plugins, command_specs = excluded.command_specs,
        keepalive = excluded.keepalive, dead_after = excluded.dead_after,
        stale_job = excluded.stale_job, self_fence_after = excluded.self_fence_after,
        state = 'running', started_at = now(), last_seen = now(),
        drain_requested_at = NULL, drain_requested_by = '', drain_reason = ''
    RETURNING name
)
SELECT coalesce((SELECT generation FROM prev), '') FROM up;
