UPDATE requeue_requests SET response = $2 WHERE key = $1;
