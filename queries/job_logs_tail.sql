-- The last @lim chunks of a job's output after seq @after, in write order,
-- filtered as job_logs.sql. A chunk holds at least one line, so the last N
-- chunks hold the last N lines; the API cuts the first chunks to exactly N.
-- It walks the (job_id, id) primary key backwards: a long log costs no more
-- than a short one.
SELECT id, stream, at, attempt, data
FROM (
    SELECT id, stream, at, coalesce(attempt, 0) AS attempt, data
    FROM job_logs
    WHERE job_id = @job AND (@stream::text = '' OR stream = @stream::text) AND id > @after
      AND (@since::timestamptz IS NULL OR at >= @since::timestamptz)
    ORDER BY id DESC
    LIMIT @lim
) last
ORDER BY id;
