-- Ask agent @name to drain: stored on its row, read back by its next
-- heartbeat (heartbeat.sql). A second request keeps the first's time, who
-- and why (the agent drains once). A stopped agent has nothing to drain:
-- its row is returned unchanged, and the caller refuses. No row: no such
-- agent.
WITH req AS (
    UPDATE agents
    SET drain_requested_at = now(), drain_requested_by = @by, drain_reason = @reason
    WHERE name = @name AND state <> 'stopped' AND drain_requested_at IS NULL
    RETURNING name
)
SELECT a.state, coalesce(r.name IS NOT NULL, false)
FROM agents a
LEFT JOIN req r ON r.name = a.name
WHERE a.name = @name;
