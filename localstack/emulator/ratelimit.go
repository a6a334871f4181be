package emulator

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RateLimit is one token bucket: Burst tokens at most, refilled at Rate
// tokens per second. Each call takes one. AWS calls these the burst and
// sustained rates.
type RateLimit struct {
	Rate  float64 `json:"rate"`
	Burst float64 `json:"burst"`
}

func (l RateLimit) validate(key string) error {
	// Each action a key names is non-empty: no empty key, no stray "+".
	if slices.Contains(strings.Split(key, "+"), "") {
		return fmt.Errorf("rate limit %q: want an action name or actions joined by +", key)
	}
	if l.Rate < 0 || l.Burst < 0 {
		return fmt.Errorf("rate limit %s: rate and burst must not be negative", key)
	}
	if l.Rate > 0 && l.Burst > 0 && l.Burst < 1 {
		return fmt.Errorf("rate limit %s: a burst below 1 admits nothing", key)
	}
	return nil
}

func (l RateLimit) String() string {
	if l.Rate <= 0 {
		return "off"
	}
	return strconv.FormatFloat(l.Rate, 'g', -1, 64) + "/" + strconv.FormatFloat(l.burst(), 'g', -1, 64)
}

// burst defaults to one second's worth of calls.
func (l RateLimit) burst() float64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return max(1, l.Rate)
}

// DefaultRateLimits are the per-account, per-Region figures the emulator
// applies when rate limits are on. Only some are confirmed against AWS
// documents. README.md says which, and where each figure comes from.
func DefaultRateLimits() map[string]RateLimit {
	return map[string]RateLimit{
		// ECS, "Request throttling for the Amazon ECS API".
		"DescribeClusters":         {Rate: 20, Burst: 50},
		"DescribeTasks":            {Rate: 20, Burst: 100},
		"ListTasks":                {Rate: 20, Burst: 100},
		"RunTask":                  {Rate: 20, Burst: 20},
		"StopTask":                 {Rate: 20, Burst: 20},
		"RegisterTaskDefinition":   {Rate: 1, Burst: 20},
		"DeregisterTaskDefinition": {Rate: 1, Burst: 20},
		"DescribeTaskDefinition":   {Rate: 10, Burst: 20},
		"ListTaskDefinitions":      {Rate: 10, Burst: 20},
		// CloudWatch Logs quotas: TPS per account per Region, no burst given.
		"GetLogEvents":       {Rate: 10, Burst: 10},
		"DescribeLogStreams": {Rate: 5, Burst: 5},
	}
}

// EffectiveRateLimits merges figures over DefaultRateLimits. A key names one
// action or several joined by "+" that share a bucket, and replaces the
// figures of every action it names. Rate 0 removes the limit.
func EffectiveRateLimits(figures map[string]RateLimit) map[string]RateLimit {
	out := DefaultRateLimits()
	// Sorted, so a joint key and a single one for the same action resolve
	// the same way every time.
	for _, key := range slices.Sorted(maps.Keys(figures)) {
		for _, op := range strings.Split(key, "+") {
			maps.DeleteFunc(out, func(k string, _ RateLimit) bool {
				return slices.Contains(strings.Split(k, "+"), op)
			})
		}
		if l := figures[key]; l.Rate > 0 {
			out[key] = l
		}
	}
	return out
}

// bucket is a token bucket. It starts full.
type bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

func (b *bucket) take(now time.Time) bool {
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// newBuckets builds the buckets by operation for f, or nil when rate limits
// are off. Actions sharing a key share one bucket.
func newBuckets(f Faults, now time.Time) map[string]*bucket {
	if !f.RateLimits {
		return nil
	}
	out := map[string]*bucket{}
	for key, l := range EffectiveRateLimits(f.RateLimitFigures) {
		b := &bucket{rate: l.Rate, burst: l.burst(), tokens: l.burst(), last: now}
		for _, op := range strings.Split(key, "+") {
			out[op] = b
		}
	}
	return out
}

// ParseRateLimit reads "Action=rate/burst", "Action=rate" (burst = one
// second's worth) or "Action=off". Action may be several joined by "+".
func ParseRateLimit(s string) (string, RateLimit, error) {
	key, fig, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return "", RateLimit{}, fmt.Errorf("rate limit %q: want Action=rate/burst", s)
	}
	var l RateLimit
	if fig != "off" {
		rate, burst, hasBurst := strings.Cut(fig, "/")
		var err error
		if l.Rate, err = strconv.ParseFloat(rate, 64); err != nil || l.Rate <= 0 {
			return "", RateLimit{}, fmt.Errorf("rate limit %q: rate must be a positive number (or the figure \"off\")", s)
		}
		if hasBurst {
			if l.Burst, err = strconv.ParseFloat(burst, 64); err != nil || l.Burst < 1 {
				return "", RateLimit{}, fmt.Errorf("rate limit %q: burst must be a number of at least 1", s)
			}
		}
	}
	if err := l.validate(key); err != nil {
		return "", RateLimit{}, err
	}
	return key, l, nil
}
