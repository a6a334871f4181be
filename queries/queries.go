// Package queries holds every SQL statement tether runs. These are the schema
// migrations under migrations/ and one .sql file per statement, embedded at
// build time. A part that several statements share is written once under
// fragments/ and stands in a statement as {{name}} (fragments/name.sql).
package queries

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"
)

//go:embed *.sql migrations/*.sql fragments/*.sql
var files embed.FS

// Get returns the statement in <name>.sql. It panics if the file is missing:
// names are compile-time constants, so a missing file is a build mistake that
// every test catches.
func Get(name string) string {
	b, err := files.ReadFile(name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("queries: no statement %q: %v", name, err))
	}
	return expand(string(b))
}

// fragmentRE is a fragment's place in a statement.
var fragmentRE = regexp.MustCompile(`\{\{([a-z_]+)\}\}`)

// expand puts each fragment in its place. It panics on a missing fragment,
// like Get on a missing statement. The fragment's comment lines are left
// out, so the statement reads as if written in one piece.
func expand(sql string) string {
	if !strings.Contains(sql, "{{") {
		return sql
	}
	return fragmentRE.ReplaceAllStringFunc(sql, func(place string) string {
		name := fragmentRE.FindStringSubmatch(place)[1]
		b, err := files.ReadFile("fragments/" + name + ".sql")
		if err != nil {
			panic(fmt.Sprintf("queries: no fragment %q: %v", name, err))
		}
		var kept []string
		for line := range strings.Lines(string(b)) {
			if !strings.HasPrefix(line, "--") {
				kept = append(kept, line)
			}
		}
		return strings.TrimSuffix(strings.Join(kept, ""), "\n")
	})
}

// Migration is one schema version.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// Compatible marks an expand-only migration (its file has a line
	// CompatibleMarker): agents that do not know it run on a schema that
	// has it, so a rolling upgrade can apply it while older agents run and
	// restart. It is recorded apart from the others (migrate_record_compatible.sql).
	Compatible bool
}

// CompatibleMarker is the line that marks a migration Compatible.
const CompatibleMarker = "-- tether: compatible with agents that do not know this migration"

// Migrations returns the schema migrations in version order. Files are named
// NNNN_description.sql.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "migrations")
	if err != nil {
		return nil, fmt.Errorf("reading migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		var v int
		if _, err := fmt.Sscanf(name, "%04d_", &v); err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql", name)
		}
		b, err := files.ReadFile("migrations/" + name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", name, err)
		}
		compatible := slices.Contains(strings.Split(string(b), "\n"), CompatibleMarker)
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(b), Compatible: compatible})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("migration %s: versions must run 1,2,3… without gaps", out[i].Name)
		}
	}
	return out, nil
}
