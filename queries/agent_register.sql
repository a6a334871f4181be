-- Register this process under its name with a fresh generation. Returns the
-- generation the name had before ('' for a new name).
WITH prev AS (
    SELECT generation FROM agents WHERE name = $1
), up AS (
    INSERT INTO agents (name, generation, version, capacity, commands, plugins, state, started_at, last_seen)
    VALUES ($1, $2, $3, $4, $5, $6, 'running', now(), now())
    ON CONFLICT (name) DO UPDATE
    SET generation = excluded.generation, version = excluded.version,
        capacity = excluded.capacity, commands = excluded.commands,
        plugins = excluded.plugins, state = 'running',
        started_at = now(), last_seen = now()
    RETURNING name
)
SELECT coalesce((SELECT generation FROM prev), '') FROM up;
