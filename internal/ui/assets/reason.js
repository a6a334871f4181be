// Why a job failed, in words, for the list and the job's page.

// retriesExhausted says "retries exhausted (3/3)" for a failed job whose
// retriable failure was not retried because its attempts used up
// max_retry, '' otherwise.
export function retriesExhausted(j) {
  const max = j.limits?.max_retry;
  if (j.status !== 'failed' || j.error_class !== 'retriable' || typeof max !== 'number') return '';
  return j.attempt > max ? `retries exhausted (${j.attempt}/${max + 1})` : '';
}

// failureReason is a finished job's error with its class (or the
// exhausted retries), and for a job being retried the last attempt's
// error; '' when there is none.
export function failureReason(j) {
  if (!j.error) return '';
  if (j.status === 'failed' || j.status === 'canceled') {
    return [retriesExhausted(j) || j.error_class || '', j.error].filter(Boolean).join(': ');
  }
  if (j.status === 'succeeded') return '';
  return `retrying after attempt ${j.attempt - 1}: ${j.error}`;
}
