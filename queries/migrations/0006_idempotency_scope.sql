-- tether schema v6: idempotency keys are scoped per submitter (the token's
-- name, or the request's submitter with auth off), so one client's key never
-- collides with, or reveals, another's.
ALTER TABLE jobs DROP CONSTRAINT jobs_idempotency_key_key;
CREATE UNIQUE INDEX jobs_submitter_idempotency_key ON jobs (submitter, idempotency_key);

-- Requeue keys likewise, per who asked ('' when nobody is named). Keys
-- stored before v6 belong to ''.
ALTER TABLE requeue_requests ADD COLUMN requested_by text NOT NULL DEFAULT '';
ALTER TABLE requeue_requests DROP CONSTRAINT requeue_requests_pkey;
ALTER TABLE requeue_requests ADD PRIMARY KEY (requested_by, key);
