-- The cluster gauges the last janitor turn's pass measured, and their age
-- by the database clock (NULL stats: no pass has measured yet).
SELECT stats, extract(epoch FROM now() - stats_at)::float8 FROM janitor_turn WHERE id;
