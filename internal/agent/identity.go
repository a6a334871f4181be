package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// resolveName picks the agent's stable identity. That is the configured name,
// else the ECS task ID from the task metadata endpoint, else the hostname.
func resolveName(ctx context.Context, configured string, getenv func(string) string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if uri := getenv("ECS_CONTAINER_METADATA_URI_V4"); uri != "" {
		id, err := ecsTaskID(ctx, uri)
		if err != nil {
			return "", fmt.Errorf("reading the ECS task ID for agent.name (set agent.name or TETHER_AGENT_NAME to skip): %w", err)
		}
		return id, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading hostname for agent.name (set agent.name or TETHER_AGENT_NAME): %w", err)
	}
	return host, nil
}

// ecsTaskID asks the ECS task metadata endpoint (v4) for this task's ARN and
// returns its last path element, the task ID.
func ecsTaskID(ctx context.Context, uri string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(uri, "/")+"/task", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("task metadata endpoint answered %s", resp.Status)
	}
	var meta struct {
		TaskARN string `json:"TaskARN"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		return "", fmt.Errorf("decoding task metadata: %w", err)
	}
	i := strings.LastIndex(meta.TaskARN, "/")
	if i < 0 || i == len(meta.TaskARN)-1 {
		return "", fmt.Errorf("task metadata has no usable TaskARN (%q)", meta.TaskARN)
	}
	return meta.TaskARN[i+1:], nil
}

// newGeneration returns a fresh random identity for this process start.
func newGeneration() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating agent generation: %w", err)
	}
	return hex.EncodeToString(b), nil
}
