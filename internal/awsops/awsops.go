// Package awsops finds the AWS operations a Go program can call: the
// operations of aws-sdk-go-v2 service clients its own packages call (client
// methods, presign methods and paginators), and the input fields they set.
// It type-checks the program's packages from the compiler's export data
// (`go list -export`), so a call is found by the type of its receiver, not
// by a name.
package awsops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// servicePrefix is where the SDK's service packages live.
const servicePrefix = "github.com/aws/aws-sdk-go-v2/service/"

// Op is one AWS operation a program calls.
type Op struct {
	Service   string // the SDK's package name: "ecs", "cloudwatchlogs"
	Operation string // "RunTask"
}

func (o Op) String() string { return o.Service + "." + o.Operation }

// Use is what a program does with one operation: where it calls it and which
// fields of its input it sets anywhere.
type Use struct {
	Calls []string        // file:line of each call, relative to the module
	Sets  map[string]bool // fields of <Operation>Input set by a literal or an assignment
}

// Uses are a program's operations.
type Uses map[Op]*Use

func (u Uses) use(op Op) *Use {
	if u[op] == nil {
		u[op] = &Use{Sets: map[string]bool{}}
	}
	return u[op]
}

// Ops returns the operations called, sorted. An input built and never
// passed to a call found here does not count.
func (u Uses) Ops() []Op {
	var ops []Op
	for op, use := range u {
		if len(use.Calls) > 0 {
			ops = append(ops, op)
		}
	}
	slices.SortFunc(ops, func(a, b Op) int { return strings.Compare(a.String(), b.String()) })
	return ops
}

// listed is what `go list -json` says of one package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// Load finds the operations the module's own packages among the
// dependencies of mains (package patterns, e.g. "./plugins/ecs") call. go
// is the go command, run in moduleDir with env (nil: the process's) and
// flags added to `go list` (build flags such as -trimpath; they choose the
// compiled variant, so tests can share a build cache with other builds).
func Load(ctx context.Context, goCmd, moduleDir string, env, flags []string, mains ...string) (Uses, error) {
	pkgs, err := list(ctx, goCmd, moduleDir, env, flags, mains)
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs(moduleDir)
	if err != nil {
		return nil, fmt.Errorf("awsops: %w", err)
	}
	exports := map[string]string{}
	var own []listed
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
		if strings.HasPrefix(p.Dir, root+string(filepath.Separator)) && len(p.GoFiles) > 0 {
			own = append(own, p)
		}
	}
	if len(own) == 0 {
		return nil, fmt.Errorf("awsops: no package under %s among the dependencies of %v", root, mains)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("awsops: no export data for %s", path)
		}
		return os.Open(f)
	})
	uses := Uses{}
	for _, p := range own {
		if err := check(fset, imp, p, root, uses); err != nil {
			return nil, err
		}
	}
	return uses, nil
}

// list runs `go list -deps -export -json` and decodes its packages.
func list(ctx context.Context, goCmd, dir string, env, flags, mains []string) ([]listed, error) {
	args := append([]string{"list", "-deps", "-export", "-json=ImportPath,Dir,GoFiles,Export,Module,Error"}, flags...)
	cmd := exec.CommandContext(ctx, goCmd, append(args, mains...)...)
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("awsops: go list %v: %w\n%s", mains, err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("awsops: decoding go list's output: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("awsops: package %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
}

// check type-checks one package and records its calls in uses.
func check(fset *token.FileSet, imp types.Importer, p listed, moduleDir string, uses Uses) error {
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
		if err != nil {
			return fmt.Errorf("awsops: parsing %s: %w", name, err)
		}
		files = append(files, f)
	}
	info := &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Uses:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
	}
	conf := types.Config{Importer: imp}
	if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
		return fmt.Errorf("awsops: type-checking %s: %w", p.ImportPath, err)
	}
	w := walker{fset: fset, info: info, uses: uses, root: moduleDir}
	for _, f := range files {
		ast.Inspect(f, w.visit)
	}
	return nil
}

type walker struct {
	fset *token.FileSet
	info *types.Info
	uses Uses
	root string
}

func (w walker) visit(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.CallExpr:
		if op, ok := w.callee(n); ok {
			u := w.uses.use(op)
			u.Calls = append(u.Calls, w.where(n.Pos()))
		}
	case *ast.CompositeLit:
		w.literalFields(n)
	case *ast.AssignStmt:
		for _, lhs := range n.Lhs {
			w.assignedField(lhs)
		}
	}
	return true
}

// where is a position as file:line relative to the module.
func (w walker) where(pos token.Pos) string {
	p := w.fset.Position(pos)
	if rel, err := filepath.Rel(w.root, p.Filename); err == nil {
		p.Filename = rel
	}
	return fmt.Sprintf("%s:%d", filepath.ToSlash(p.Filename), p.Line)
}

// callee reports the operation a call starts: a method named after an
// operation that takes its input (context, *<Op>Input, ...) — a service
// Client's, or any interface or wrapper with that shape — a Presign<Op>
// method of a PresignClient, or a service's New<Op>Paginator function.
func (w walker) callee(call *ast.CallExpr) (Op, bool) {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.Ident:
		id = f
	default:
		return Op{}, false
	}
	fn, ok := w.info.Uses[id].(*types.Func)
	if !ok {
		return Op{}, false
	}
	sig := fn.Signature()
	if sig.Recv() != nil {
		return operationOf(sig, strings.TrimPrefix(fn.Name(), "Presign"))
	}
	name, isPaginator := strings.CutSuffix(strings.TrimPrefix(fn.Name(), "New"), "Paginator")
	if fn.Pkg() == nil || !strings.HasPrefix(fn.Pkg().Path(), servicePrefix) || !isPaginator || !strings.HasPrefix(fn.Name(), "New") {
		return Op{}, false
	}
	return Op{fn.Pkg().Name(), name}, true
}

// operationOf reports the operation op of a method whose signature takes
// (context.Context, *<op>Input, ...), the input a service package's.
func operationOf(sig *types.Signature, op string) (Op, bool) {
	if sig.Params().Len() < 2 {
		return Op{}, false
	}
	o, ok := inputOp(sig.Params().At(1).Type())
	return o, ok && o.Operation == op
}

// inputName is the name of a service package's type t (or *t) ending in
// "Input".
func inputName(t types.Type) (string, bool) {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil || !strings.HasPrefix(n.Obj().Pkg().Path(), servicePrefix) || !strings.HasSuffix(n.Obj().Name(), "Input") {
		return "", false
	}
	return n.Obj().Name(), true
}

// inputOp is the operation whose input t is.
func inputOp(t types.Type) (Op, bool) {
	name, ok := inputName(t)
	if !ok {
		return Op{}, false
	}
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	return Op{t.(*types.Named).Obj().Pkg().Name(), strings.TrimSuffix(name, "Input")}, true
}

// literalFields records the fields a composite literal of an operation's
// input sets.
func (w walker) literalFields(lit *ast.CompositeLit) {
	op, ok := inputOp(w.info.Types[lit].Type)
	if !ok {
		return
	}
	for _, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if key, ok := kv.Key.(*ast.Ident); ok {
				w.uses.use(op).Sets[key.Name] = true
			}
		}
	}
}

// assignedField records x.Field = … where x is an operation's input.
func (w walker) assignedField(lhs ast.Expr) {
	sel, ok := ast.Unparen(lhs).(*ast.SelectorExpr)
	if !ok || w.info.Selections[sel] == nil || w.info.Selections[sel].Kind() != types.FieldVal {
		return
	}
	if op, ok := inputOp(w.info.Selections[sel].Recv()); ok {
		w.uses.use(op).Sets[sel.Sel.Name] = true
	}
}
