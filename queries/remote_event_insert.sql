-- Records what a plugin said a job's checkpointed handle points at (kind
-- remote), unless the job's newest remote event says exactly that already,
-- so a plugin checkpointing every few seconds adds a row only on a change.
-- Runs in the checkpoint's transaction after its fenced handle write, whose
-- row lock keeps two writers of one job from both inserting. The newest
-- remote event is found through job_events_job (job_id, id), backwards.
INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
SELECT @job_id::text, 'remote', @agent::text, @generation::text, @lease::bigint, @message::text
WHERE NOT EXISTS (
    SELECT 1
    FROM (
        SELECT message FROM job_events
        WHERE job_id = @job_id::text AND kind = 'remote'
        ORDER BY id DESC
        LIMIT 1
    ) newest
    WHERE newest.message = @message::text
);
