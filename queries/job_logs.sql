-- A page of a job's output after seq @after, in write order; @stream '' means
-- both; @since (NULL: any) keeps the chunks received at or after it (the
-- agent's clock). attempt is 0 for rows stored before schema v7.
SELECT id, stream, at, coalesce(attempt, 0), data
FROM job_logs
WHERE job_id = @job AND (@stream::text = '' OR stream = @stream::text) AND id > @after
  AND (@since::timestamptz IS NULL OR at >= @since::timestamptz)
ORDER BY id
LIMIT @lim;
