-- The message of the newest remote event of each attempt of one job (only
-- that job's rows, through job_events_job), oldest attempt first.
SELECT DISTINCT ON ((message::jsonb ->> 'attempt')::int) message
FROM job_events
WHERE job_id = @job_id AND kind = 'remote'
ORDER BY (message::jsonb ->> 'attempt')::int, id DESC;
