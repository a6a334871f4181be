-- Store the cluster gauges the janitor turn's pass measured, for every
-- agent to export (janitor_stats_read.sql).
UPDATE janitor_turn SET stats = @stats::jsonb, stats_at = now() WHERE id;
