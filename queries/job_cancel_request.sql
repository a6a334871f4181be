-- A claimed job becomes canceling; its owner sees that in its heartbeat (or the
-- notification) and stops the plugin call.
WITH j AS (
    UPDATE jobs SET status = 'canceling', updated_at = now()
    WHERE id = $1
    RETURNING id
), e AS (
    INSERT INTO job_events (job_id, kind, message)
    SELECT id, 'cancel_requested', $2 FROM j
)
SELECT pg_notify('tether_cancel', $1);
