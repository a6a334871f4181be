-- Fenced, batched, idempotent log append for many jobs at once, in write
-- order across both streams. Inputs are two sets of parallel arrays:
--   jobs:    @job_ids, @leases — one element per job;
--   records: @rec_jobs (the job's index in @job_ids, 1-based), @rec_seqs
--            (the chunk's number in its runner's write order, 1, 2, …; 0 =
--            no identity, always stored), @rec_streams, @rec_ats (when the
--            agent received the bytes), @rec_data — in the order written.
-- A record whose number is at or below what the job's active row says is
-- stored for this lease (log_lease, log_seq) was stored by an earlier send
-- of the same chunk, whose acknowledgement was lost (a timeout, a hung
-- server that committed it later): it is skipped, and counts nowhere. The
-- active row is locked first, so of two sends racing each other the second
-- reads what the first stored (a locked row is re-read at its newest
-- version) and skips it.
-- Every row is fenced by its lease and, when @generation is set, by its
-- holder's generation too: a database that lost its history may hand the
-- same lease number to another process (see docs/design.md, "When the
-- database forgets"), whose job this process must never write into.
-- Each stream is capped at @max bytes per job; the record crossing the cap is
-- cut and followed by one truncation marker. Rows are inserted in record
-- order, so the bigserial id (the seq) is write order. One pg_notify per job
-- wakes its followers when the transaction commits. Returns the job IDs whose
-- lease still held.
WITH input AS (
    SELECT * FROM unnest(@job_ids::text[], @leases::bigint[]) WITH ORDINALITY AS t(job_id, lease, idx)
), cur AS (
    SELECT a.job_id, i.idx, a.stdout_bytes, a.stderr_bytes, a.stdout_truncated, a.stderr_truncated, j.attempt,
           CASE WHEN a.log_lease = a.lease THEN a.log_seq ELSE 0 END AS stored_seq
    FROM active_jobs a
    JOIN input i ON i.job_id = a.job_id AND i.lease = a.lease
    JOIN jobs j ON j.id = a.job_id
    WHERE (@generation::text = '' OR a.agent_generation = @generation::text)
    ORDER BY a.job_id
    FOR UPDATE OF a
), fresh AS (
    -- The records not stored yet.
    SELECT c.job_id, c.attempt, r.job_idx, r.seq, r.stream, r.at, r.data, r.ord
    FROM unnest(@rec_jobs::bigint[], @rec_seqs::bigint[], @rec_streams::text[], @rec_ats::timestamptz[], @rec_data::bytea[])
        WITH ORDINALITY AS r(job_idx, seq, stream, at, data, ord)
    JOIN cur c ON c.idx = r.job_idx
    WHERE r.seq = 0 OR r.seq > c.stored_seq
), rec AS (
    SELECT f.*,
           sum(length(f.data)) OVER (PARTITION BY f.job_idx, f.stream ORDER BY f.ord) - length(f.data) AS before
    FROM fresh f
), acc AS (
    SELECT r.job_id, r.attempt, r.stream, r.at, r.ord,
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
        stderr_truncated = a.stderr_truncated OR s.err_cut,
        log_lease = a.lease,
        log_seq = greatest(CASE WHEN a.log_lease = a.lease THEN a.log_seq ELSE 0 END, s.top_seq)
    FROM (
        SELECT f.job_id,
               coalesce(sum(length(acc.keep)) FILTER (WHERE acc.stream = 'stdout'), 0) AS out_kept,
               coalesce(sum(length(acc.keep)) FILTER (WHERE acc.stream = 'stderr'), 0) AS err_kept,
               coalesce(bool_or(acc.cut) FILTER (WHERE acc.stream = 'stdout'), false) AS out_cut,
               coalesce(bool_or(acc.cut) FILTER (WHERE acc.stream = 'stderr'), false) AS err_cut,
               max(f.seq) AS top_seq
        FROM fresh f
        LEFT JOIN acc ON acc.job_id = f.job_id AND acc.ord = f.ord
        GROUP BY f.job_id
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
