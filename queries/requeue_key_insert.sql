-- Claim an operator requeue's idempotency key inside the requeue's
-- transaction; nothing returned = the key is taken (a concurrent duplicate
-- waits here until the first commits). Keys are per who asked. $1 who asked,
-- $2 key, $3 job, $4 request hash.
INSERT INTO requeue_requests (requested_by, key, job_id, request_hash, response)
VALUES ($1, $2, $3, $4, '{}')
ON CONFLICT (requested_by, key) DO NOTHING
RETURNING key;
