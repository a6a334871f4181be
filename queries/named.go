package queries

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Statement is one statement written with named parameters (@name),
// rewritten to positional ones when the package loads, so a call on the hot
// path pays no parsing (pgx.NamedArgs rewrites the text on every call:
// 6–23 µs per statement, measured).
type Statement struct {
	SQL   string   // with $1, $2, …
	names []string // the name behind each $n
}

// Args orders named values as the statement's positional parameters. A name
// the statement uses but args lacks is passed as NULL, as pgx.NamedArgs does.
func (s Statement) Args(args map[string]any) []any {
	out := make([]any, len(s.names))
	for i, n := range s.names {
		out[i] = args[n]
	}
	return out
}

// Named returns the statement in <name>.sql, rewritten. It panics if the
// file is missing, like Get.
func Named(name string) Statement {
	s, ok := named[name]
	if !ok {
		panic(fmt.Sprintf("queries: no statement %q", name))
	}
	return s
}

// named holds every statement, compiled once at load. It is never written
// after.
var named = compileNamed()

var paramRE = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

func compileNamed() map[string]Statement {
	out := map[string]Statement{}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(fmt.Sprintf("queries: reading statements: %v", err))
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok || e.IsDir() {
			continue
		}
		sql := Get(name)
		// Each candidate name's value is the name itself, so the rewritten
		// arguments list the names in $n order (pgx skips comments and
		// string literals when it rewrites).
		candidates := pgx.NamedArgs{}
		for _, m := range paramRE.FindAllStringSubmatch(sql, -1) {
			candidates[m[1]] = m[1]
		}
		rewritten, order, err := candidates.RewriteQuery(context.Background(), nil, sql, nil)
		if err != nil {
			panic(fmt.Sprintf("queries: rewriting %s: %v", name, err))
		}
		names := make([]string, len(order))
		for i, v := range order {
			names[i], _ = v.(string)
		}
		out[name] = Statement{SQL: rewritten, names: names}
	}
	return out
}
