-- The list filters that apply to any job j, as job_counts.sql reads them
-- ('' / NULL = any): command, submitter and the created_at window. The
-- window's UUIDv7 prefix bounds (see job_list.sql) are plain conditions on
-- j.id, with an unset one always true, so an index on id stops at them.
(@command::text = '' OR j.command = @command)
      AND (@submitter::text = '' OR j.submitter = @submitter)
      AND j.id >= coalesce(@since_id::text, '') AND j.id < coalesce(@until_id::text, '~')
      AND (@since::timestamptz IS NULL OR j.created_at >= @since)
      AND (@until::timestamptz IS NULL OR j.created_at < @until)
