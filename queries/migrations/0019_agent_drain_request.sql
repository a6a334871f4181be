-- tether schema v19: an operator may ask a running agent to drain through
-- the database (tether agent drain, POST /api/v1/agents/{name}/drain). The
-- request is stored on the agent's row, which its heartbeat renews anyway,
-- so the agent reads it back at no extra cost and drains as on SIGTERM.
-- A new process under the name (a fresh registration) starts without one.
-- Added columns with defaults only: agents of v18 run on this schema (they
-- never write or read them, and do not act on a drain request).
-- tether: compatible with agents that do not know this migration
ALTER TABLE agents
    ADD COLUMN drain_requested_at timestamptz,
    ADD COLUMN drain_requested_by text NOT NULL DEFAULT '',
    ADD COLUMN drain_reason text NOT NULL DEFAULT '';
