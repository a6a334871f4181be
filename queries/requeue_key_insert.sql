-- Claim an operator requeue's idempotency key inside the requeue's
-- transaction; nothing returned = the key is taken (a concurrent duplicate
-- waits here until the first commits). $1 key, $2 job, $3 request hash.
INSERT INTO requeue_requests (key, job_id, request_hash, response)
VALUES ($1, $2, $3, '{}')
ON CONFLICT (key) DO NOTHING
RETURNING key;
