-- Fenced, batched log append for many jobs at once. Inputs are parallel arrays,
-- one element per job: job_id, lease, stdout bytes, stderr bytes. Each stream is
-- capped at $5 bytes per job; the chunk crossing the cap is cut and followed by
-- one truncation marker. Returns the job IDs whose lease still held.
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::bytea[])
        AS t(job_id, lease, out_data, err_data)
), cur AS (
    SELECT a.job_id, a.stdout_bytes, a.stderr_bytes, a.stdout_truncated, a.stderr_truncated,
           i.out_data, i.err_data,
           GREATEST(0, $5 - a.stdout_bytes) AS out_room,
           GREATEST(0, $5 - a.stderr_bytes) AS err_room
    FROM active_jobs a
    JOIN input i ON i.job_id = a.job_id AND i.lease = a.lease
    ORDER BY a.job_id
    FOR UPDATE OF a
), acc AS (
    SELECT job_id,
           substring(out_data FROM 1 FOR out_room::int) AS out_keep,
           substring(err_data FROM 1 FOR err_room::int) AS err_keep,
           NOT stdout_truncated AND length(out_data) > out_room AS out_cut,
           NOT stderr_truncated AND length(err_data) > err_room AS err_cut
    FROM cur
), upd AS (
    UPDATE active_jobs a
    SET stdout_bytes = a.stdout_bytes + length(acc.out_keep),
        stderr_bytes = a.stderr_bytes + length(acc.err_keep),
        stdout_truncated = a.stdout_truncated OR acc.out_cut,
        stderr_truncated = a.stderr_truncated OR acc.err_cut
    FROM acc
    WHERE a.job_id = acc.job_id
), ins AS (
    INSERT INTO job_logs (job_id, stream, data)
    SELECT job_id, stream, data FROM (
        SELECT job_id, 'stdout' AS stream, out_keep AS data, 1 AS ord FROM acc WHERE length(out_keep) > 0
        UNION ALL
        SELECT job_id, 'stdout', convert_to(E'\n[tether: stdout truncated at ' || $5 || E' bytes; raise logs.max_bytes_per_stream to keep more]\n', 'UTF8'), 2 FROM acc WHERE out_cut
        UNION ALL
        SELECT job_id, 'stderr', err_keep, 1 FROM acc WHERE length(err_keep) > 0
        UNION ALL
        SELECT job_id, 'stderr', convert_to(E'\n[tether: stderr truncated at ' || $5 || E' bytes; raise logs.max_bytes_per_stream to keep more]\n', 'UTF8'), 2 FROM acc WHERE err_cut
    ) x
    ORDER BY job_id, stream, ord
)
SELECT job_id FROM acc;
