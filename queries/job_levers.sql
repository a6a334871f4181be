-- The stamped levers a retry decision needs, for a caller that did not get
-- them with its claim (the janitor, tests).
SELECT attempt, max_retry, extract(epoch FROM retry_backoff)::float8, extract(epoch FROM retry_backoff_max)::float8
FROM jobs WHERE id = @job;
