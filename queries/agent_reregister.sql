-- Register this process again under its name and generation after its row
-- was deleted (by an operator, or agent retention while the process was
-- silent). Unlike agent_register it never replaces a row: if another process
-- registered under the name meanwhile, that one wins, nothing is written and
-- no row is returned (the caller's next heartbeat finds itself superseded).
INSERT INTO agents (name, generation, version, capacity, commands, plugins, command_specs,
                    keepalive, dead_after, stale_job, self_fence_after, state, started_at, last_seen)
VALUES (@name, @generation, @version, @capacity, @commands, @plugins, @command_specs,
        @keepalive::float8 * interval '1 second', @dead_after::float8 * interval '1 second',
        @stale_job::float8 * interval '1 second', @self_fence_after::float8 * interval '1 second',
        @state, now(), now())
ON CONFLICT (name) DO NOTHING
RETURNING name;
