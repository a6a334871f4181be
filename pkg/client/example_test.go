package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tetherjobs/tether/internal/api"
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
	var job struct{ ID string }
	err = fo.Do(ctx, func(ctx context.Context, c *client.Client) error {
		// The idempotency key makes a retried submit return the same job.
		j, _, err := c.Submit(ctx, api.SubmitRequest{Command: "report", IdempotencyKey: "report-2026-12-01"})
		job.ID = j.ID
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	final, err := fo.Wait(ctx, job.ID, nil)
	if err != nil {
		log.Fatal(err) // ctx ended, or the job is unknown
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
	end, err := fo.FollowLogs(ctx, "0190f6a2-…", client.LogQuery{}, func(r client.LogRecord) error {
		fmt.Printf("%s #%d %s: %s\n", r.Time.Format(time.RFC3339), r.Attempt, r.Stream, r.Line)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job ended:", end.Status)
}
