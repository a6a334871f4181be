// Command client is what a program of another module writes to use tether:
// it submits a job with limits, waits for it, follows its events and, if it
// failed, requeues it and waits again. It imports only tether's pkg/client
// and pkg/api.
//
//	go run . -server http://127.0.0.1:9090 -command hello
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

func main() {
	server := flag.String("server", "http://127.0.0.1:9090", "the tether agent's API")
	command := flag.String("command", "hello", "the command to submit")
	key := flag.String("key", "", "idempotency key of the submit (a retried run submits no second job)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	log.SetFlags(0)

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := client.New(*server, client.WithToken(os.Getenv("TETHER_TOKEN")),
		client.WithPollInterval(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	final, err := run(ctx, c, *command, *key)
	if err != nil {
		log.Fatal(err)
	}
	if final.Status != api.StatusSucceeded {
		os.Exit(1)
	}
}

// run does the work through a client.Jobs, so a test could hand it a fake.
func run(ctx context.Context, jobs client.Jobs, command, key string) (api.JobDetail, error) {
	// No automatic retry: this program requeues by hand below.
	maxRetry, activeTimeout := 0, "10m"
	job, created, err := jobs.Submit(ctx, api.SubmitRequest{
		Command:        command,
		IdempotencyKey: key,
		Context:        []byte(`{"from":"examples/client"}`),
		Limits:         &api.LimitsOverride{MaxRetry: &maxRetry, ActiveTimeout: &activeTimeout},
	})
	if err != nil {
		return api.JobDetail{}, fmt.Errorf("submitting %s: %w", command, err)
	}
	fmt.Printf("submitted %s (created %t, max_retry %d, active_timeout %s)\n",
		job.ID, created, job.Limits.MaxRetry, job.Limits.ActiveTimeout)

	final, err := wait(ctx, jobs, job.ID)
	if err != nil {
		return final, err
	}
	if err := printEvents(ctx, jobs, job.ID); err != nil {
		return final, err
	}
	if final.Status != api.StatusFailed && final.Status != api.StatusCanceled {
		return final, nil
	}
	rq, err := jobs.Requeue(ctx, job.ID, api.RequeueRequest{Reason: "examples/client: try again", Key: "examples-client-" + job.ID})
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Code == api.CodeInvalidTransition {
		return final, fmt.Errorf("requeueing %s: it is no longer failed or canceled: %w", job.ID, err)
	}
	if err != nil {
		return final, fmt.Errorf("requeueing %s: %w", job.ID, err)
	}
	fmt.Printf("requeued %s: attempt %d, %s\n", rq.Job.ID, rq.Job.Attempt, rq.Job.Status)
	return wait(ctx, jobs, job.ID)
}

// wait prints each status change of the job until it is finished.
func wait(ctx context.Context, jobs client.Jobs, id string) (api.JobDetail, error) {
	final, err := jobs.Wait(ctx, id, func(j api.JobDetail) {
		fmt.Printf("status %s (attempt %d)\n", j.Status, j.Attempt)
	})
	if err != nil {
		return final, fmt.Errorf("waiting for %s: %w", id, err)
	}
	fmt.Printf("finished %s: %s%s\n", final.ID, final.Status, errorText(final.Job))
	for _, r := range final.Resources {
		fmt.Printf("resource %s %s\n", r.Kind, r.Name)
	}
	return final, nil
}

// printEvents follows the job's timeline to its end record. A Failover
// over one server reconnects if the stream is cut.
func printEvents(ctx context.Context, jobs client.Jobs, id string) error {
	c, ok := jobs.(*client.Client)
	if !ok {
		evs, err := jobs.Events(ctx, id)
		for _, e := range evs {
			printEvent(e)
		}
		return err
	}
	fo, err := client.NewFailover([]*client.Client{c})
	if err != nil {
		return err
	}
	end, err := fo.FollowEvents(ctx, id, 0, func(e api.Event) error {
		printEvent(e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("following the events of %s: %w", id, err)
	}
	fmt.Printf("events end: %s (attempt %d)\n", end.Status, end.Attempt)
	return nil
}

func printEvent(e api.Event) { fmt.Printf("event %d %s\n", e.ID, e.Kind) }

func errorText(j api.Job) string {
	if j.Error == "" {
		return ""
	}
	return fmt.Sprintf(": %s [%s]", j.Error, j.ErrorClass)
}
