-- Gives back the agent name lock (agent_name_lock.sql) when its session
-- turned out not to be this process's own (internal/agent/pooler.go).
SELECT pg_advisory_unlock(hashtext('tether-agent-name'), hashtext(@name));
