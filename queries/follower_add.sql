-- Record that a stream follows job @job, so its end is notified.
INSERT INTO job_followers (job_id) VALUES (@job) RETURNING id;
