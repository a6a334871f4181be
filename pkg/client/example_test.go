package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// Submit a job and wait for its outcome, riding out the loss of any one of
// the agents. A Failover retries the next server with backoff.
func Example_submitAndWait() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // the longest we wait
	defer cancel()
	var clients []*client.Client
	for _, server := range []string{"http://agent-a:9090", "http://agent-b:9090"} {
		c, err := client.New(server,
			client.WithToken(os.Getenv("TETHER_TOKEN")),
			client.WithRequestTimeout(30*time.Second), // single requests
			client.WithConnectTimeout(10*time.Second)) // connecting, also when following
		if err != nil {
			log.Fatal(err)
		}
		clients = append(clients, c)
	}
	fo, err := client.NewFailover(clients)
	if err != nil {
		log.Fatal(err)
	}
	// Levers of this job, within the command's limits.max.
	maxRetry, activeTimeout := 1, "90m"
	req := api.SubmitRequest{
		Command: "report",
		// The idempotency key makes a retried submit return the same job.
		IdempotencyKey: "report-2026-12-01",
		Limits:         &api.LimitsOverride{MaxRetry: &maxRetry, ActiveTimeout: &activeTimeout},
	}
	var job api.Job
	err = fo.Do(ctx, func(ctx context.Context, c *client.Client) error {
		var err error
		job, _, err = c.Submit(ctx, req)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	final, err := fo.Wait(ctx, job.ID, func(j api.JobDetail) {
		log.Printf("job %s: %s (attempt %d)", j.ID, j.Status, j.Attempt)
	})
	if err != nil {
		log.Fatal(err) // ctx ended, or the job is unknown
	}
	if final.Status == api.StatusFailed && final.ErrorClass == api.Retriable {
		log.Printf("failed after %d attempts: %s", final.Attempt, final.Error)
	}
	for _, r := range final.Resources {
		fmt.Println(r.Kind, r.Name, r.URL)
	}
	fmt.Println(final.Status, final.Error)
}

// Follow a job's output until it ends. Every line comes once, in write
// order, across reconnects. The end record carries the job's final status.
func Example_followLogs() {
	ctx := context.Background()
	a, _ := client.New("http://agent-a:9090")
	b, _ := client.New("http://agent-b:9090")
	fo, err := client.NewFailover([]*client.Client{a, b}, client.OnRetry(func(server string, err error, in time.Duration) {
		log.Printf("%s: %v; reconnecting in %s", server, err, in)
	}))
	if err != nil {
		log.Fatal(err)
	}
	end, err := fo.FollowLogs(ctx, "0190f6a2-…", client.LogQuery{}, func(l api.LogLine) error {
		fmt.Printf("%s #%d %s: %s\n", l.Time.Format(time.RFC3339), l.Attempt, l.Stream, l.Line)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job ended:", end.Status)
}

// Code that works with jobs can take a client.Jobs, which a *client.Client
// is and a test can fake.
func Example_jobsInterface() {
	rerunFailed := func(ctx context.Context, jobs client.Jobs, command string) error {
		failed, _, err := jobs.List(ctx, client.ListOptions{Status: api.StatusFailed, Command: command})
		if err != nil {
			return fmt.Errorf("listing failed %s jobs: %w", command, err)
		}
		for _, j := range failed {
			if _, err := jobs.Requeue(ctx, j.ID, api.RequeueRequest{Reason: "rerun after the fix", Key: "rerun-" + j.ID}); err != nil {
				return fmt.Errorf("requeueing %s: %w", j.ID, err)
			}
		}
		return nil
	}
	c, err := client.New("http://agent-a:9090")
	if err != nil {
		log.Fatal(err)
	}
	if err := rerunFailed(context.Background(), c, "report"); err != nil {
		log.Fatal(err)
	}
}
