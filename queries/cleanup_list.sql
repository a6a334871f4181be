-- Pending Cleanups in job_id order (UUIDv7: oldest job first), keyset-paged.
SELECT job_id, plugin, command, reason, attempts, next_at, last_error, created_at,
       claimed_by, claimed_until
FROM cleanups
WHERE $1 = '' OR job_id > $1
ORDER BY job_id
LIMIT $2;
