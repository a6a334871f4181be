-- A followed stream ended.
DELETE FROM job_followers WHERE id = @id;
