package janitor

import "time"

// cleanupBackoff is the wait after the attempts-th failed Cleanup call. It
// starts at lo, doubles per attempt, and is capped at hi.
func cleanupBackoff(attempts int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempts && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}
