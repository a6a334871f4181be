SELECT id, coalesce(request_hash, '') FROM jobs WHERE idempotency_key = $1;
