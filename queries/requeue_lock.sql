-- An operator requeue locks the job (a terminal job has no active row, so
-- this is the first lock it takes).
SELECT status FROM jobs WHERE id = $1 FOR UPDATE;
