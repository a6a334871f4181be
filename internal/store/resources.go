package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/queries"
)

// EventRemote is the kind of the event that records what a plugin said a
// job's handle points at. Its message is JSON: {"attempt":N,"resources":[…]}.
const EventRemote = "remote"

// Resource is one remote thing a plugin reported for an attempt of a job
// (an ECS task, a log stream, a Spark application), as GET /jobs/{id}
// shows it.
type Resource = api.Resource

// Described is what a plugin said a checkpointed handle points at, with
// who checkpointed it, for the remote event written with the handle.
type Described struct {
	Holder    Holder
	Attempt   int
	Resources []Resource // their Attempt is ignored: the event's is Attempt
}

// remoteMessage is a remote event's message. Its encoding is deterministic
// (fields in order, empty ones left out), so equal descriptions compare equal
// as text.
type remoteMessage struct {
	Attempt   int              `json:"attempt"`
	Resources []remoteResource `json:"resources"`
}

type remoteResource struct {
	Kind    string `json:"kind,omitempty"`
	Name    string `json:"name,omitempty"`
	Label   string `json:"label,omitempty"`
	URL     string `json:"url,omitempty"`
	Command string `json:"command,omitempty"`
}

// recordRemote writes d as a remote event of the job in tx unless the job's
// newest remote event says the same. An empty description changes nothing
// (a plugin checkpoints before its remote work exists). Call it only after
// the fenced handle write in the same transaction.
func recordRemote(ctx context.Context, tx pgx.Tx, jobID string, lease int64, d *Described) error {
	if d == nil || len(d.Resources) == 0 {
		return nil
	}
	m := remoteMessage{Attempt: d.Attempt, Resources: make([]remoteResource, len(d.Resources))}
	for i, r := range d.Resources {
		m.Resources[i] = remoteResource{Kind: r.Kind, Name: r.Name, Label: r.Label, URL: r.URL, Command: r.Command}
	}
	msg, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding remote resources: %w", err)
	}
	st := queries.Named("remote_event_insert")
	if _, err := tx.Exec(ctx, st.SQL, st.Args(map[string]any{
		"job_id": jobID, "agent": d.Holder.Name, "generation": d.Holder.Generation, "lease": lease, "message": string(msg),
	})...); err != nil {
		return fmt.Errorf("recording remote resources: %w", err)
	}
	return nil
}

// JobResources returns the resources of each attempt's newest remote event
// of a job, oldest attempt first (nil when the plugin reported none).
func (s *Store) JobResources(ctx context.Context, jobID string) ([]Resource, error) {
	st := queries.Named("job_resources")
	rows, err := s.pool.Query(ctx, st.SQL, st.Args(map[string]any{"job_id": jobID})...)
	if err != nil {
		return nil, fmt.Errorf("reading resources of job %s: %w", jobID, err)
	}
	msgs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading resources of job %s: %w", jobID, err)
	}
	var out []Resource
	for _, raw := range msgs {
		var m remoteMessage
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			return nil, fmt.Errorf("reading resources of job %s: decoding remote event: %w", jobID, err)
		}
		for _, r := range m.Resources {
			out = append(out, Resource{Attempt: m.Attempt, Kind: r.Kind, Name: r.Name, Label: r.Label, URL: r.URL, Command: r.Command})
		}
	}
	return out, nil
}
