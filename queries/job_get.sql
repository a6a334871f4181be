SELECT {{job_columns}}
FROM jobs j
LEFT JOIN active_jobs a ON a.job_id = j.id
WHERE j.id = $1;
