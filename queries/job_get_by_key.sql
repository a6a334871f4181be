-- The job an idempotency key names, within its submitter's keys.
SELECT id, coalesce(request_hash, '') FROM jobs WHERE submitter = $1 AND idempotency_key = $2;
