-- Store which of the agent's plugins fail their health check
-- (@unhealthy: plugin name -> error), for its generation only: a restarted
-- agent's row is not the old process's to write.
UPDATE agents SET unhealthy_plugins = @unhealthy::jsonb
WHERE name = @name AND generation = @generation;
