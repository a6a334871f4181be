-- tether schema v9: the console and the API search jobs by idempotency key
-- alone (GET /api/v1/jobs?idempotency_key=). The unique index leads with the
-- key so that search is an index lookup; uniqueness per (submitter, key) is
-- unchanged and ON CONFLICT (submitter, idempotency_key) still infers it.
CREATE UNIQUE INDEX jobs_idempotency_key_submitter ON jobs (idempotency_key, submitter);
DROP INDEX jobs_submitter_idempotency_key;
