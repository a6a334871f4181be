-- For the metrics: queued Cleanup calls (the table holds only those not yet
-- successful) and the age of the oldest, in seconds (0 when none).
SELECT count(*)::int,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM cleanups;
