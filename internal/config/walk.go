package config

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[Duration]()
	// A whole number as people write one: decimal digits, no sign but
	// minus, no leading zero, no 0x/0o/1_000/1e3 (YAML and strconv read
	// those differently, so the value would be a guess).
	wholeNumberRe = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
)

// yamlName returns the YAML key of a struct field, or "" if it has none.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// secretField reports whether a field holds a secret (tag `secret:"true"`).
// Its value, and any value below it, is never printed.
func secretField(f reflect.StructField) bool { return f.Tag.Get("secret") == "true" }

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// spot is where in the document a node is checked.
type spot struct {
	path   string
	secret bool   // never print the value
	max    string // the field's `max` tag (a column's range), "" = the Go type's
}

func (s spot) child(key string, f reflect.StructField) spot {
	return spot{path: joinPath(s.path, key), secret: s.secret || secretField(f), max: f.Tag.Get("max")}
}

// checkNode walks a YAML node against the Go type it will be decoded into and
// reports, with the full path and line, every unknown key and every value
// that does not fit its key. Malformed durations, non-integers or
// out-of-range numbers for integer keys, lists or mappings where a string
// is expected, and the like. Values of secret keys are never quoted.
// Free-form values (map[string]any) are not inspected.
func checkNode(n *yaml.Node, t reflect.Type, at spot, errs *[]error) {
	n, t = resolveNode(n, t)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	switch {
	case t == durationType:
		if _, err := durationNode(n); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", at.path, err))
		}
	case t.Kind() == reflect.Struct:
		checkStructNode(n, t, at, errs)
	case t.Kind() == reflect.Map:
		checkMapNode(n, t, at, errs)
	case t.Kind() == reflect.Slice:
		checkListNode(n, t, at, errs)
	default:
		if msg := scalarProblem(n, t, at); msg != "" {
			nodeFail(n, at, errs, "%s", msg)
		}
	}
}

// resolveNode follows an alias to its node, and a pointer type to what it
// points to. Optional values (command limits) are checked like the value.
func resolveNode(n *yaml.Node, t reflect.Type) (*yaml.Node, reflect.Type) {
	if n.Kind == yaml.AliasNode { // the parser refuses an alias to no anchor
		n = n.Alias
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return n, t
}

// nodeFail reports that the node at at is wrong, with its path and line.
func nodeFail(n *yaml.Node, at spot, errs *[]error, format string, args ...any) {
	*errs = append(*errs, fmt.Errorf("%s: %s (line %d)", orTop(at.path), fmt.Sprintf(format, args...), n.Line))
}

// checkStructNode checks a mapping of a struct's keys: every key known,
// every value checked against its field.
func checkStructNode(n *yaml.Node, t reflect.Type, at spot, errs *[]error) {
	if n.Kind != yaml.MappingNode {
		nodeFail(n, at, errs, "expected a mapping of keys (%s), got %s", strings.Join(knownKeys(t), ", "), describe(n, at.secret))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Value == "<<" {
			continue // merge key: its keys are checked where they are defined
		}
		f, ok := fieldByKey(t, k.Value)
		if !ok {
			*errs = append(*errs, fmt.Errorf("%s: unknown key (line %d); known keys here: %s",
				joinPath(at.path, k.Value), k.Line, strings.Join(knownKeys(t), ", ")))
			continue
		}
		checkNode(n.Content[i+1], f.Type, at.child(k.Value, f), errs)
	}
}

// checkMapNode checks a mapping by name (plugins, commands, env). A
// free-form one (map[string]any) is the plugin's to check.
func checkMapNode(n *yaml.Node, t reflect.Type, at spot, errs *[]error) {
	if n.Kind != yaml.MappingNode {
		nodeFail(n, at, errs, "expected a mapping, got %s", describe(n, at.secret))
		return
	}
	if t.Elem().Kind() == reflect.Interface {
		return // free-form: the plugin checks it
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode {
			*errs = append(*errs, fmt.Errorf("%s: keys must be strings, got %s (line %d)", at.path, describe(k, false), k.Line))
			continue
		}
		child := spot{path: joinPath(at.path, k.Value), secret: at.secret}
		checkNode(n.Content[i+1], t.Elem(), child, errs)
	}
}

func checkListNode(n *yaml.Node, t reflect.Type, at spot, errs *[]error) {
	if n.Kind != yaml.SequenceNode {
		nodeFail(n, at, errs, "expected a list, got %s", describe(n, at.secret))
		return
	}
	for i, item := range n.Content {
		checkNode(item, t.Elem(), spot{path: at.path + "[" + strconv.Itoa(i) + "]", secret: at.secret}, errs)
	}
}

// scalarProblem says why a scalar node does not fit a string, bool or
// integer key, or returns "".
func scalarProblem(n *yaml.Node, t reflect.Type, at spot) string {
	switch t.Kind() {
	case reflect.String:
		return stringProblem(n, at)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return "must be true or false, got " + describe(n, at.secret)
		}
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || !numberTag(n) {
			return "must be a whole number such as 4, got " + describe(n, at.secret)
		}
		if err := checkInt(n.Value, t.Bits(), at.max); err != nil {
			return err.Error()
		}
	}
	return ""
}

// numberTag reports whether YAML reads n as a number, as it does 4 and 4.5.
func numberTag(n *yaml.Node) bool { return n.Tag == "!!int" || n.Tag == "!!float" }

func stringProblem(n *yaml.Node, at spot) string {
	switch {
	case n.Kind != yaml.ScalarNode:
		return "expected a string, got " + describe(n, at.secret)
	case n.Tag == "!!binary":
		return "expected a plain string, got a !!binary value"
	case strings.ContainsRune(n.Value, 0):
		return "must not contain a NUL character"
	}
	return ""
}

// checkInt says why s is not a whole number of the given bit size within
// max (a `max` tag; "" = the type's own range), or returns nil.
func checkInt(s string, bits int, max string) error {
	if !wholeNumberRe.MatchString(s) {
		return fmt.Errorf("%q is not an integer: must be a whole number written in decimal digits, such as 4", s)
	}
	limit := int64(math.MaxInt64 >> (64 - bits))
	if max != "" {
		m, err := strconv.ParseInt(max, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("config: bad max tag %q", max)) // a programming error in a struct tag
		}
		limit = m
	}
	v, err := strconv.ParseInt(s, 10, bits)
	if err != nil || v > limit {
		if strings.HasPrefix(s, "-") {
			return fmt.Errorf("%s is out of range: must be at least %d and at most %d", s, -limit-1, limit)
		}
		return fmt.Errorf("%s is out of range: must be at most %d", s, limit)
	}
	return nil
}

func orTop(path string) string { return cmp.Or(path, "config") }

// collectionNames name the nodes describe never quotes.
var collectionNames = map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}

// describe names what a node is, quoting a scalar's value unless secret.
func describe(n *yaml.Node, secret bool) string {
	if what, ok := collectionNames[n.Kind]; ok {
		return what
	}
	if secret {
		return "a scalar (value not shown: the key holds a secret)"
	}
	v := n.Value
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return strconv.Quote(v)
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func knownKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			keys = append(keys, name)
		}
	}
	return keys
}

// sortedKeys returns m's keys, sorted: an empty, non-nil slice for no keys.
func sortedKeys[V any](m map[string]V) []string {
	keys := slices.AppendSeq(make([]string, 0, len(m)), maps.Keys(m))
	slices.Sort(keys)
	return keys
}
