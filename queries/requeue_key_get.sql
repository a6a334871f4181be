SELECT request_hash, response FROM requeue_requests WHERE key = $1;
