package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Output formats of -o. Machine formats go to stdout alone. Notices, job
// output and logs go to stderr, so a script can parse stdout.
const (
	outTable = "table"
	outJSON  = "json"
	outJSONL = "jsonl"
	outYAML  = "yaml"
)

func validOutput(s string) bool {
	return slices.Contains([]string{outTable, outJSON, outJSONL, outYAML}, s)
}

// machine reports whether -o asks for a machine format.
func (a *app) machine() bool { return a.output != outTable }

// printJSON writes v as indented JSON to stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// emit writes one object in the machine format of -o. That is indented JSON,
// one compact JSON line, or YAML with the JSON field names.
func (a *app) emit(v any) error {
	switch a.output {
	case outJSONL:
		return json.NewEncoder(a.stdout).Encode(v)
	case outYAML:
		b, err := toYAML(v)
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(b)
		return err
	default:
		return a.printJSON(v)
	}
}

// show writes v in the machine format of -o, or runs text under -o table.
func (a *app) show(v any, text func() error) error {
	if a.machine() {
		return a.emit(v)
	}
	return text()
}

// printList writes a list answer: emitList's under a machine -o, else a
// table of header and a row per item, then on stderr the cursor of the next
// page when there is one.
func printList[T any](a *app, key string, items []T, next *string, header string, row func(io.Writer, T)) error {
	if a.machine() {
		return emitList(a, key, items, next)
	}
	tw := a.table()
	if !a.noHeaders {
		fmt.Fprintln(tw, header)
	}
	for _, it := range items {
		row(tw, it)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != nil && *next != "" {
		fmt.Fprintf(a.stderr, "more %s: --after %s (or --all)\n", key, *next)
	}
	return nil
}

// emitList writes a list answer: under -o json and yaml the API's object
// ({key: items, "next": ...} when paged), under jsonl one item per line.
func emitList[T any](a *app, key string, items []T, next *string) error {
	if items == nil {
		items = []T{}
	}
	if a.output == outJSONL {
		enc := json.NewEncoder(a.stdout)
		for _, it := range items {
			if err := enc.Encode(it); err != nil {
				return err
			}
		}
		return nil
	}
	obj := map[string]any{key: items}
	if next != nil {
		obj["next"] = *next
	}
	return a.emit(obj)
}

// toYAML renders v as YAML with the names and order of its JSON encoding.
// JSON is YAML, so the node tree of the JSON keeps both. Clearing the flow
// style makes it block YAML.
func toYAML(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding output: %w", err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("encoding output as YAML: %w", err)
	}
	blockStyle(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := errors.Join(enc.Encode(&n), enc.Close()); err != nil {
		return nil, fmt.Errorf("encoding output as YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// blockStyle clears every node's style. Nodes decoded from JSON are flow
// collections, double-quoted strings or plain scalars, so this turns the
// collections to block YAML and lets the encoder quote what needs quoting.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}
