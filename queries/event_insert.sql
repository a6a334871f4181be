INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
VALUES ($1, $2, $3, $4, $5, $6);
