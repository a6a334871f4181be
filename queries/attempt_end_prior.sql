-- Whether this holder (@agent, @generation) already ended or released its
-- attempt under @lease: asked only after a fenced end or release was sent,
-- its answer lost (a timeout, a connection cut, a hung server that
-- committed it later), and sent again to find the fence gone. The first
-- send's event says what it stored: a final event carries the lease it was
-- fenced by; retry_scheduled and released carry the lease they bumped to
-- (@lease + 1). Also returns the Cleanup claim that end gave this holder's
-- agent (@cleanup_by), if it still holds it, so the runner runs its Cleanup
-- as it would have; and the job's attempt now. Reads the job's own events
-- (primary key (job_id, id)).
SELECT e.kind,
       j.attempt,
       coalesce(c.claimed_by, ''),
       coalesce(c.attempts, 0)
FROM job_events e
JOIN jobs j ON j.id = e.job_id
LEFT JOIN cleanups c ON c.job_id = e.job_id AND c.claimed_by = nullif(@cleanup_by::text, '')
                     AND c.claimed_until > now()
WHERE e.job_id = @job AND e.agent = @agent AND e.generation = @generation
  AND ((e.kind IN ('succeeded', 'failed', 'canceled') AND e.lease = @lease)
       OR (e.kind IN ('retry_scheduled', 'released') AND e.lease = @lease + 1))
ORDER BY e.id DESC
LIMIT 1;
