-- The first statement of a fenced, batched, idempotent log append
-- (store.appendLogs). It locks the active rows of the jobs whose output
-- is about to be stored, in job_id order (two appends racing each other
-- lock in the same order), and reads what the append plans against: the highest record number stored under
-- this lease (log_lease, log_seq; a record at or below it was stored by an
-- earlier send of the same chunk whose acknowledgement was lost), each
-- stream's bytes and truncation so far, and the attempt the rows belong to.
-- A locked row is re-read at its newest version, so of two sends of the same
-- chunk racing each other the second sees what the first stored.
-- Every job is fenced by its lease and, when @generation is set, by its
-- holder's generation too: a database that lost its history may hand the
-- same lease number to another process (see docs/design.md, "When the
-- database forgets"), whose job this process must never write into. A job
-- whose fence fails returns no row, and none of its output is stored.
SELECT a.job_id,
       CASE WHEN a.log_lease = a.lease THEN a.log_seq ELSE 0 END AS stored_seq,
       a.stdout_bytes, a.stderr_bytes, a.stdout_truncated, a.stderr_truncated, j.attempt
FROM active_jobs a
JOIN unnest(@job_ids::text[], @leases::bigint[]) AS i(job_id, lease) ON i.job_id = a.job_id AND i.lease = a.lease
JOIN jobs j ON j.id = a.job_id
WHERE (@generation::text = '' OR a.agent_generation = @generation::text)
ORDER BY a.job_id
FOR UPDATE OF a;
