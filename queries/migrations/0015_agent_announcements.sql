-- tether schema v15: each agent announces what other agents must know to
-- judge it and to route work to it. Agents of one fleet may be configured
-- differently (several ECS services, a rolling change of keepalive), so a
-- rule that compares two agents reads the other's timings, never assumes
-- its own.
--   keepalive, dead_after, stale_job, self_fence_after: the agent's own
--     timings (NULL for an agent older than v15: judged by the checker's).
--   command_specs: per command it serves, its plugin and the levers its
--     configuration sets ({"cmd": {"plugin": "ecs", "limits": {...}}}), so
--     any agent can accept a submit for a command another live agent serves.
-- Adding columns with constant defaults rewrites nothing (PostgreSQL ≥ 11).
ALTER TABLE agents
    ADD COLUMN keepalive        interval,
    ADD COLUMN dead_after       interval,
    ADD COLUMN stale_job        interval,
    ADD COLUMN self_fence_after interval,
    ADD COLUMN command_specs    jsonb NOT NULL DEFAULT '{}';
