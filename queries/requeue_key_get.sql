SELECT request_hash, response FROM requeue_requests WHERE requested_by = $1 AND key = $2;
