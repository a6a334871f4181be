-- A page of a job's output after seq @after, in write order; @stream '' means
-- both. attempt is 0 for rows stored before schema v7.
SELECT id, stream, at, coalesce(attempt, 0), data
FROM job_logs
WHERE job_id = @job AND (@stream::text = '' OR stream = @stream::text) AND id > @after
ORDER BY id
LIMIT @lim;
