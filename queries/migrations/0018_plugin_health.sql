-- tether schema v18: each agent announces which of its plugins fail their
-- health check (plugin name -> the check's error), so every agent's API can
-- say which commands no healthy agent serves. An agent claims no job of a
-- command whose plugin fails here. Older agents leave it empty.
ALTER TABLE agents ADD COLUMN unhealthy_plugins jsonb NOT NULL DEFAULT '{}';
