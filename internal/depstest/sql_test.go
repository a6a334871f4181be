package depstest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// statementMethods are the pgx methods that run SQL, with the fewest
// arguments each takes (a context and the statement, or CopyFrom's four).
// The check reads names, not types, so any method of these names with as
// many arguments counts. The count keeps http.Request's URL.Query() and the
// like out.
var statementMethods = map[string]int{"Exec": 2, "Query": 2, "QueryRow": 2, "SendBatch": 2, "CopyFrom": 4}

// sqlExempt are the product packages outside internal/store that may run
// a statement, each with the reason.
var sqlExempt = map[string]string{
	"internal/dbhistory": "reads the WAL position inside pgx's AfterConnect hook, on a connection the store has not seen yet; internal/store imports it",
	"internal/pgcluster": "administers the PostgreSQL server it starts for tests and tether dev (ALTER SYSTEM, pg_reload_conf), not tether's data",
}

// runsSQL reports whether the package at dir (relative to the module) is
// allowed to call pgx's statement methods.
func runsSQL(dir string) bool {
	_, exempt := sqlExempt[dir]
	return dir == "internal/store" || strings.HasPrefix(dir, "internal/store/") || exempt || !product(dir)
}

// statementCall is one call of a statement method, as file:line.
type statementCall struct {
	dir, at string
}

// statementCalls lists the statement method calls of every non-test Go
// file of the module, nested modules (tools/…) left out.
func statementCalls(t *testing.T) []statementCall {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.Contains(string(b), "module "+module+"\n") {
		t.Fatalf("%s is not the root of %s: %v", root, module, err)
	}
	var calls []statementCall
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return skipDir(root, path, d.Name())
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if least, ok := statementMethods[sel.Sel.Name]; ok && len(call.Args) >= least {
				p := fset.Position(call.Pos())
				calls = append(calls, statementCall{dir: dir, at: filepath.ToSlash(rel) + ":" + strconv.Itoa(p.Line)})
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// skipDir leaves out what is not this module's Go code.
func skipDir(root, path, name string) error {
	if path == root {
		return nil
	}
	if strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules" {
		return filepath.SkipDir
	}
	if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
		return filepath.SkipDir
	}
	return nil
}

// Every statement goes through internal/store (docs/design.md).
func TestOnlyTheStoreRunsSQL(t *testing.T) {
	calls := statementCalls(t)
	if !slices.ContainsFunc(calls, func(c statementCall) bool { return c.dir == "internal/store" }) {
		t.Fatal("found no statement in internal/store: the check would see nothing")
	}
	used := map[string]bool{}
	for _, c := range calls {
		used[c.dir] = true
		if !runsSQL(c.dir) {
			t.Errorf("%s runs a statement outside internal/store: move the statement behind a method of internal/store", c.at)
		}
	}
	for dir := range sqlExempt {
		if !used[dir] {
			t.Errorf("%s is exempt from the SQL rule but runs no statement: take it off sqlExempt", dir)
		}
	}
}
