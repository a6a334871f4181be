UPDATE requeue_requests SET response = $3 WHERE requested_by = $1 AND key = $2;
