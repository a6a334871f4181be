// Command funcmetrics prints the function metrics docs/design.md quotes:
// branch points per 100 function lines, the share of functions whose
// cyclomatic complexity is above 10, and the longest functions.
//
// It reads Go source only (go/parser), so it runs as well on another
// project's checkout as on tether's: `go run . DIR...` from this directory.
// Test files, generated files and the directories named by -skip are left
// out. A function literal counts toward the function that contains it, as
// gocyclo counts it.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// complexityLimit is the cyclomatic complexity above which a function is
// counted as complex.
const complexityLimit = 10

type function struct {
	name     string
	pos      token.Position
	lines    int
	branches int
}

func (f function) complexity() int { return f.branches + 1 }

func main() {
	skip := flag.String("skip", "", "comma-separated directory names to leave out (matched against each path element)")
	top := flag.Int("top", 10, "how many of the most complex and the longest functions to list")
	byDir := flag.Bool("by-dir", false, "also print the figures of each directory, densest first")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: funcmetrics [-skip a,b] [-top N] DIR...")
		os.Exit(2)
	}
	skipped := map[string]bool{"testdata": true, "vendor": true}
	for _, s := range strings.Split(*skip, ",") {
		if s != "" {
			skipped[s] = true
		}
	}
	var funcs []function
	for _, root := range flag.Args() {
		found, err := scan(root, skipped)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		funcs = append(funcs, found...)
	}
	report(funcs, *top)
	if *byDir {
		reportByDir(funcs)
	}
}

// scan parses every non-test, non-generated .go file under root.
func scan(root string, skipped map[string]bool) ([]function, error) {
	var funcs []function
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (skipped[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		if ast.IsGenerated(file) {
			return nil
		}
		for _, decl := range file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			funcs = append(funcs, function{
				name:     funcName(fd),
				pos:      start,
				lines:    end.Line - start.Line + 1,
				branches: branches(fd.Body),
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", root, err)
	}
	return funcs, nil
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if ix, ok := t.(*ast.IndexListExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// branches counts the decision points gocyclo counts: if, for, range, each
// non-default case and select clause, and each && and ||.
func branches(body ast.Node) int {
	n := 0
	ast.Inspect(body, func(node ast.Node) bool {
		switch x := node.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			n++
		case *ast.CaseClause:
			if x.List != nil {
				n++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				n++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				n++
			}
		}
		return true
	})
	return n
}

func report(funcs []function, top int) {
	var lines, branchCount, complex, over120 int
	for _, f := range funcs {
		lines += f.lines
		branchCount += f.branches
		if f.complexity() > complexityLimit {
			complex++
		}
		if f.lines > 120 {
			over120++
		}
	}
	if len(funcs) == 0 || lines == 0 {
		fmt.Println("no functions found")
		return
	}
	fmt.Printf("functions: %d, function lines: %d\n", len(funcs), lines)
	fmt.Printf("branch points per 100 function lines: %.1f\n", 100*float64(branchCount)/float64(lines))
	fmt.Printf("functions above cyclomatic complexity %d: %d (%.1f %%)\n", complexityLimit, complex, 100*float64(complex)/float64(len(funcs)))
	fmt.Printf("functions above 120 lines: %d\n", over120)
	list := func(title string, less func(a, b function) bool, value func(function) int) {
		sorted := append([]function(nil), funcs...)
		sort.SliceStable(sorted, func(i, j int) bool { return less(sorted[i], sorted[j]) })
		fmt.Println(title)
		for _, f := range sorted[:min(top, len(sorted))] {
			fmt.Printf("  %4d  %s  %s:%d\n", value(f), f.name, f.pos.Filename, f.pos.Line)
		}
	}
	list("most complex:", func(a, b function) bool { return a.complexity() > b.complexity() }, function.complexity)
	list("longest:", func(a, b function) bool { return a.lines > b.lines }, func(f function) int { return f.lines })
}

// reportByDir prints each directory's branch density, densest first, so a
// reader sees where the decisions are.
func reportByDir(funcs []function) {
	type totals struct{ lines, branches, complex int }
	dirs := map[string]*totals{}
	for _, f := range funcs {
		dir := filepath.Dir(f.pos.Filename)
		t := dirs[dir]
		if t == nil {
			t = &totals{}
			dirs[dir] = t
		}
		t.lines += f.lines
		t.branches += f.branches
		if f.complexity() > complexityLimit {
			t.complex++
		}
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	density := func(d string) float64 { return 100 * float64(dirs[d].branches) / float64(dirs[d].lines) }
	sort.Slice(names, func(i, j int) bool { return density(names[i]) > density(names[j]) })
	fmt.Println("by directory (density, branches, lines, above complexity 10):")
	for _, d := range names {
		t := dirs[d]
		fmt.Printf("  %5.1f  %5d  %6d  %3d  %s\n", density(d), t.branches, t.lines, t.complex, d)
	}
}
