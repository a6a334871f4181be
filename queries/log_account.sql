-- The last statement of a log append (store.appendLogs), after the chunks
-- were copied into job_logs in the same transaction: it records on each
-- job's active row, locked by log_lock.sql, what was stored (bytes kept per
-- stream, whether a stream was cut at its cap, the highest record number
-- now stored under this lease), and wakes each job's followers
-- (tether_logs) when the transaction commits. One element per job in the
-- parallel arrays, for the jobs that had records not stored before.
WITH s AS (
    SELECT * FROM unnest(@job_ids::text[], @out_kept::bigint[], @err_kept::bigint[],
                         @out_cut::boolean[], @err_cut::boolean[], @top_seqs::bigint[], @notify::boolean[])
        AS t(job_id, out_kept, err_kept, out_cut, err_cut, top_seq, notify)
), upd AS (
    UPDATE active_jobs a
    SET stdout_bytes = a.stdout_bytes + s.out_kept,
        stderr_bytes = a.stderr_bytes + s.err_kept,
        stdout_truncated = a.stdout_truncated OR s.out_cut,
        stderr_truncated = a.stderr_truncated OR s.err_cut,
        log_lease = a.lease,
        log_seq = greatest(CASE WHEN a.log_lease = a.lease THEN a.log_seq ELSE 0 END, s.top_seq)
    FROM s
    WHERE a.job_id = s.job_id
)
SELECT count(*) FROM (SELECT pg_notify('tether_logs', s.job_id) FROM s WHERE s.notify) n;
