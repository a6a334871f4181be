-- tether schema v12: what the hot path pays per job, reviewed (issue 18).
--
-- 1. The jobs row changes status three times per job (claimed, running,
--    ended). While any index names status, every one of those changes
--    writes a new entry in every index of jobs. indexed_status is status
--    only where a query looks a status up (canceling and the ended ones),
--    NULL while queued, accepted or running: the claim and the running
--    write then change no indexed value and are HOT updates (same page, no
--    index entries), given room on the page (fillfactor 70). Listing the
--    live statuses goes through active_jobs (one row per live job).
ALTER TABLE jobs SET (fillfactor = 70);
ALTER TABLE jobs ADD COLUMN indexed_status text GENERATED ALWAYS AS (
    CASE WHEN status IN ('queued', 'accepted', 'running') THEN NULL ELSE status END
) STORED;
CREATE INDEX jobs_indexed_status_id ON jobs (indexed_status, id) WHERE indexed_status IS NOT NULL;
DROP INDEX jobs_status_id;

-- 2. Events and log chunks are only ever read per job in id order, so
--    (job_id, id) is their primary key and their only index; the foreign
--    key to jobs is gone: its check locked the jobs row for every event
--    (three per job) and log chunk. Every insert is fenced by the job's
--    active row or its cleanup, and retention (retention_delete.sql), the
--    only thing that deletes jobs, deletes their events and logs with them.
ALTER TABLE job_events DROP CONSTRAINT job_events_job_id_fkey;
ALTER TABLE job_events DROP CONSTRAINT job_events_pkey;
ALTER TABLE job_events ADD PRIMARY KEY (job_id, id);
DROP INDEX job_events_job;

ALTER TABLE job_logs DROP CONSTRAINT job_logs_job_id_fkey;
ALTER TABLE job_logs DROP CONSTRAINT job_logs_pkey;
ALTER TABLE job_logs ADD PRIMARY KEY (job_id, id);
DROP INDEX job_logs_job;
DROP INDEX job_logs_job_seq;
