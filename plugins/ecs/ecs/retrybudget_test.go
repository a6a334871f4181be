package ecs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
)

// Under account-wide throttling (the emulator's DescribeTasks bucket at
// one call a second) the SDK retries every throttled call. Each retry
// takes a call from the process's budget as the first attempt did, so the
// calls ECS receives, retries included, stay within describe_tasks.
func TestSDKRetriesStayWithinAPIRates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{RateLimits: true, RateLimitFigures: map[string]emulator.RateLimit{"DescribeTasks": {Rate: 1, Burst: 1}}})
	cl := mustClients(t, e)
	const rate = 4.0
	cl.setRates(map[string]float64{apiDescribeTasks: rate})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	e.em.ResetCalls()
	began := time.Now()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if cl.wait(ctx, apiDescribeTasks) != nil {
					return
				}
				_, _ = cl.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{"arn:aws:ecs:us-east-1:000000000000:task/default/0"}})
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began).Seconds()
	calls, throttled := e.em.Calls()
	t.Logf("%d DescribeTasks in %.1f s (%d throttled); budget %.0f/s, burst %d", calls["DescribeTasks"], elapsed, throttled["DescribeTasks"], rate, burstOf(rate))
	require.Positive(t, throttled["DescribeTasks"], "the account limit throttled some: retries happened")
	require.LessOrEqual(t, float64(calls["DescribeTasks"]), rate*elapsed+float64(burstOf(rate)),
		"every attempt, retries included, within describe_tasks")
}
