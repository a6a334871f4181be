-- Take the fleet's janitor turn (schema v17): the agent that runs this first
-- once the last pass began @period seconds ago (its clean_interval, less a
-- margin for its timer's jitter) passes for everyone; the rest get no row
-- and skip this interval. SKIP LOCKED: nobody waits on another's take. The
-- turn is taken when this commits, so an agent that freezes mid-pass delays
-- the next pass by one interval at most. Returns the database clock, when
-- the previous pass began ('-infinity': never) and whether the server
-- restarted (or another took over) since then.
WITH prev AS (
    SELECT t.passed_at, t.server_started
    FROM janitor_turn t
    WHERE t.id
    FOR UPDATE SKIP LOCKED
)
UPDATE janitor_turn t
SET passed_at = now(), passer = @self_name, server_started = pg_postmaster_start_time()
FROM prev
WHERE t.id
  AND prev.passed_at <= now() - @period::float8 * interval '1 second'
RETURNING now(), prev.passed_at, prev.server_started IS DISTINCT FROM pg_postmaster_start_time();
