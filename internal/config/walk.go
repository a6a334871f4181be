package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[Duration]()
)

// yamlName returns the YAML key of a struct field, or "" if it has none.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkNode walks a YAML node against the Go type it will be decoded into and
// reports unknown keys and malformed durations with their full path.
// Free-form values (map[string]any) are not inspected.
func checkNode(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem() // optional values (command limits) are checked like the value
	}
	switch {
	case t == durationType:
		if err := durationNodeError(n); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", path, err))
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			*errs = append(*errs, fmt.Errorf("%s: expected a mapping of keys (%s), got %s", orTop(path), strings.Join(knownKeys(t), ", "), describe(n)))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if key == "<<" {
				continue // merge key: its keys are checked where they are defined
			}
			f, ok := fieldByKey(t, key)
			if !ok {
				*errs = append(*errs, fmt.Errorf("%s: unknown key (line %d); known keys here: %s",
					joinPath(path, key), n.Content[i].Line, strings.Join(knownKeys(t), ", ")))
				continue
			}
			checkNode(n.Content[i+1], f.Type, joinPath(path, key), errs)
		}
	case t.Kind() == reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return
		}
		if n.Kind != yaml.MappingNode {
			*errs = append(*errs, fmt.Errorf("%s: expected a mapping, got %s", path, describe(n)))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkNode(n.Content[i+1], t.Elem(), joinPath(path, n.Content[i].Value), errs)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			*errs = append(*errs, fmt.Errorf("%s: expected a list, got %s", path, describe(n)))
			return
		}
		for i, item := range n.Content {
			checkNode(item, t.Elem(), path+"["+strconv.Itoa(i)+"]", errs)
		}
	}
}

func orTop(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
