// Command tether-healthcheck is the image's container health check: it asks
// the agent's /healthz and exits 0 when it answers 200, 1 otherwise. The
// image has no shell or curl; the task definition runs this in exec form.
//
//	tether-healthcheck [URL]   (default http://127.0.0.1:9090/healthz)
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

const defaultURL = "http://127.0.0.1:9090/healthz"

func main() {
	url := defaultURL
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	if err := check(url); err != nil {
		fmt.Fprintln(os.Stderr, "tether-healthcheck:", err)
		os.Exit(1)
	}
}

func check(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
