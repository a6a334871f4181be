-- Fenced, batched log append for many jobs at once, in write order across
-- both streams. Inputs are two sets of parallel arrays:
--   jobs:    @job_ids, @leases — one element per job;
--   records: @rec_jobs (the job's index in @job_ids, 1-based), @rec_streams,
--            @rec_ats (when the agent received the bytes), @rec_data — in
--            the order they were written.
-- Each stream is capped at @max bytes per job; the record crossing the cap is
-- cut and followed by one truncation marker. Rows are inserted in record
-- order, so the bigserial id (the seq) is write order. One pg_notify per job
-- wakes its followers when the transaction commits. Returns the job IDs whose
-- lease still held.
WITH input AS (
    SELECT * FROM unnest(@job_ids::text[], @leases::bigint[]) WITH ORDINALITY AS t(job_id, lease, idx)
), cur AS (
    SELECT a.job_id, i.idx, a.stdout_bytes, a.stderr_bytes, a.stdout_truncated, a.stderr_truncated, j.attempt
    FROM active_jobs a
    JOIN input i ON i.job_id = a.job_id AND i.lease = a.lease
    JOIN jobs j ON j.id = a.job_id
    ORDER BY a.job_id
    FOR UPDATE OF a
), rec AS (
    SELECT r.job_idx, r.stream, r.at, r.data, r.ord,
           sum(length(r.data)) OVER (PARTITION BY r.job_idx, r.stream ORDER BY r.ord) - length(r.data) AS before
    FROM unnest(@rec_jobs::bigint[], @rec_streams::text[], @rec_ats::timestamptz[], @rec_data::bytea[])
        WITH ORDINALITY AS r(job_idx, stream, at, data, ord)
), acc AS (
    SELECT c.job_id, c.attempt, r.stream, r.at, r.ord,
           substring(r.data FROM 1 FOR GREATEST(0, room - r.before)::int) AS keep,
           NOT truncated AND r.before <= room AND r.before + length(r.data) > room AS cut
    FROM rec r
    JOIN cur c ON c.idx = r.job_idx
    CROSS JOIN LATERAL (
        SELECT CASE WHEN r.stream = 'stdout' THEN GREATEST(0, @max::bigint - c.stdout_bytes) ELSE GREATEST(0, @max::bigint - c.stderr_bytes) END AS room,
               CASE WHEN r.stream = 'stdout' THEN c.stdout_truncated ELSE c.stderr_truncated END AS truncated
    ) x
), upd AS (
    UPDATE active_jobs a
    SET stdout_bytes = a.stdout_bytes + s.out_kept,
        stderr_bytes = a.stderr_bytes + s.err_kept,
        stdout_truncated = a.stdout_truncated OR s.out_cut,
        stderr_truncated = a.stderr_truncated OR s.err_cut
    FROM (
        SELECT job_id,
               coalesce(sum(length(keep)) FILTER (WHERE stream = 'stdout'), 0) AS out_kept,
               coalesce(sum(length(keep)) FILTER (WHERE stream = 'stderr'), 0) AS err_kept,
               coalesce(bool_or(cut) FILTER (WHERE stream = 'stdout'), false) AS out_cut,
               coalesce(bool_or(cut) FILTER (WHERE stream = 'stderr'), false) AS err_cut
        FROM acc GROUP BY job_id
    ) s
    WHERE a.job_id = s.job_id
), ins AS (
    INSERT INTO job_logs (job_id, stream, at, attempt, data)
    SELECT job_id, stream, at, attempt, data FROM (
        SELECT job_id, stream, at, attempt, keep AS data, ord, 1 AS sub FROM acc WHERE length(keep) > 0
        UNION ALL
        SELECT job_id, stream, at, attempt,
               convert_to(E'\n[tether: ' || stream || ' truncated at ' || @max::bigint || E' bytes; raise logs.max_bytes_per_stream to keep more]\n', 'UTF8'),
               ord, 2
        FROM acc WHERE cut
    ) x
    ORDER BY ord, sub
    RETURNING job_id
), n AS (
    SELECT pg_notify('tether_logs', job_id) FROM (SELECT DISTINCT job_id FROM ins) x
)
SELECT job_id FROM cur
WHERE (SELECT count(*) FROM n) >= 0;
