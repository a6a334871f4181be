SELECT a.name, a.generation, a.started_at, a.last_seen,
       extract(epoch FROM now() - a.last_seen)::float8,
       a.state, a.version, a.capacity, a.commands, a.plugins,
       (SELECT count(*) FROM active_jobs x WHERE x.agent_name = a.name)::int
FROM agents a
ORDER BY a.name;
