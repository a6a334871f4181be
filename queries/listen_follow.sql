-- Wake-ups for the API's followers (internal/notify): a job's output was
-- stored, or the job ended. Listened to only by agents that serve the API.
LISTEN tether_logs; LISTEN tether_job_end;
