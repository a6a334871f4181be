-- tether schema v8: who follows a job. The end of a job sends its
-- followers' NOTIFY (tether_job_end) only when a row here says someone
-- follows it: a NOTIFY takes a database-wide lock at commit, which every
-- ending job would otherwise pay (measured: ≈ 7 % of throughput at 2 and 4
-- agents). One row per followed stream, removed when it ends; a row left by
-- a crashed agent costs one needless NOTIFY and goes with its job.
CREATE TABLE job_followers (
    id     bigserial PRIMARY KEY,
    job_id text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    since  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_followers_job ON job_followers (job_id);
