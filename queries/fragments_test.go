package queries

import (
	"io/fs"
	"strings"
	"testing"
)

// Every fragment a statement names exists and is put in its place.
func TestStatementsHaveNoFragmentLeft(t *testing.T) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if ok && strings.Contains(Get(name), "{{") {
			t.Errorf("%s.sql: a {{fragment}} was left in the statement", name)
		}
	}
}

// The job readers select one column list, the one store.scanJob reads.
func TestJobReadersShareTheColumnList(t *testing.T) {
	cols := expand("{{job_columns}}")
	if !strings.HasPrefix(cols, "j.id, ") {
		t.Fatalf("job_columns starts %q, want the job's id first", cols[:min(len(cols), 20)])
	}
	for _, name := range []string{"job_get", "job_list", "job_list_live"} {
		if !strings.Contains(Get(name), "SELECT "+cols+"\nFROM ") {
			t.Errorf("%s.sql does not select {{job_columns}}", name)
		}
	}
}
