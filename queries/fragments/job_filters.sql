-- The list filters that apply to any job j, as job_counts.sql reads them
-- ('' / NULL = any): command, submitter and the created_at window (with its
-- UUIDv7 prefix bounds, see job_list.sql).
(@command::text = '' OR j.command = @command)
      AND (@submitter::text = '' OR j.submitter = @submitter)
      AND (@since::timestamptz IS NULL OR (j.created_at >= @since AND j.id >= @since_id::text))
      AND (@until::timestamptz IS NULL OR (j.created_at < @until AND j.id < @until_id::text))
