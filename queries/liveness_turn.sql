-- Take the fleet's liveness turn (schema v16), in the check's transaction:
-- the agent that runs this first once the last check is @period seconds old
-- (its keepalive, less a margin for its timer), or once due_at has come (an
-- agent may be found dead now), checks for everyone; the rest get no row and
-- skip this keepalive. The row lock (SKIP LOCKED: nobody waits on a check in
-- flight) is held until the check has stored its memory. Returns the
-- database clock (the transaction's, as every now() of the check), the
-- previous check's time, and whether the server restarted (or another took
-- over) since then.
WITH prev AS (
    SELECT t.checked_at, t.server_started
    FROM liveness_turn t
    WHERE t.id
    FOR UPDATE SKIP LOCKED
)
UPDATE liveness_turn t
SET checked_at = now(), due_at = NULL, checker = @self_name, server_started = pg_postmaster_start_time()
FROM prev
WHERE t.id
  AND (prev.checked_at <= now() - @period::float8 * interval '1 second' OR t.due_at <= now())
RETURNING now(), prev.checked_at, prev.server_started IS DISTINCT FROM pg_postmaster_start_time();
