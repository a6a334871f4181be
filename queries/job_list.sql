-- Jobs newest first, keyset-paged by id (@after: the last id of the previous
-- page). Every filter is optional ('' / NULL = any). @since and @until bound
-- created_at exactly; @since_id and @until_id are the same bounds widened by
-- the allowed clock skew and written as UUIDv7 prefixes, so the primary key
-- index jumps to the window instead of walking every newer job (ids are
-- UUIDv7 made by the submitting agent's clock, created_at is the database's).
-- A status filter here is one of the indexed statuses (canceling and the
-- ended ones: jobs_indexed_status_id); the live ones (queued, accepted,
-- running) are listed by job_list_live.sql, through active_jobs.
SELECT {{job_columns}}
FROM jobs j
LEFT JOIN active_jobs a ON a.job_id = j.id
WHERE (@status::text = '' OR j.indexed_status = @status)
  AND (@command::text = '' OR j.command = @command)
  AND (@submitter::text = '' OR j.submitter = @submitter)
  AND (@idempotency_key::text = '' OR j.idempotency_key = @idempotency_key)
  AND (@after::text = '' OR j.id < @after)
  AND (@since::timestamptz IS NULL OR (j.created_at >= @since AND j.id >= @since_id::text))
  AND (@until::timestamptz IS NULL OR (j.created_at < @until AND j.id < @until_id::text))
ORDER BY j.id DESC
LIMIT @limit;
