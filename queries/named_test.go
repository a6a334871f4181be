package queries

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A compiled statement orders values exactly as pgx.NamedArgs would.
func TestNamedMatchesPgxRewrite(t *testing.T) {
	args := map[string]any{"job": "j", "lease": int64(3), "expect": "", "status": "succeeded", "result": nil,
		"error": "e", "error_class": "c", "agent": "a", "generation": "g", "event_lease": int64(4),
		"event_kind": "k", "message": "m", "retry": true, "wait_s": 1.5, "cleanup": true,
		"cleanup_by": "a", "cleanup_hold_s": 2.0}
	for _, name := range []string{"attempt_end", "attempt_end_final_batch", "claim", "job_levers"} {
		st := Named(name)
		sql, want, err := pgx.NamedArgs(args).RewriteQuery(context.Background(), nil, Get(name), nil)
		if err != nil {
			t.Fatal(err)
		}
		if sql != st.SQL {
			t.Errorf("%s: SQL differs from pgx's rewrite", name)
		}
		got := st.Args(args)
		if len(got) != len(want) {
			t.Fatalf("%s: %d args, pgx gives %d", name, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: $%d = %v, pgx gives %v", name, i+1, got[i], want[i])
			}
		}
	}
}
