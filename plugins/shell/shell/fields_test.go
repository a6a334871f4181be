package shell

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/tetherjobs/tether/pkg/plugin/settings"
)

func TestDecodeFields(t *testing.T) {
	errBad := errors.New("bad")
	// Each parser appends its key, so the result shows which ran, in order.
	table := []field[[]string]{
		{"a", func(seen *[]string, _ json.RawMessage) error { *seen = append(*seen, "a"); return nil }},
		{"b", func(seen *[]string, _ json.RawMessage) error { *seen = append(*seen, "b"); return errBad }},
		{"c", func(seen *[]string, _ json.RawMessage) error { *seen = append(*seen, "c"); return nil }},
	}
	tests := []struct {
		name    string
		fields  settings.Fields
		want    []string
		wantErr error
	}{
		{"none set", settings.Fields{}, nil, nil},
		{"table order", settings.Fields{"c": json.RawMessage(`1`), "a": json.RawMessage(`1`)}, []string{"a", "c"}, nil},
		{"null is unset", settings.Fields{"a": json.RawMessage(`null`), "c": json.RawMessage(`1`)}, []string{"c"}, nil},
		{"stops at the first error", settings.Fields{"a": json.RawMessage(`1`), "b": json.RawMessage(`1`), "c": json.RawMessage(`1`)}, []string{"a", "b"}, errBad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []string
			err := decodeFields(&seen, tt.fields, table)
			if !errors.Is(err, tt.wantErr) || !slices.Equal(seen, tt.want) {
				t.Errorf("decodeFields = %v, %v; want %v, %v", seen, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestEnviron(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{}, []string{}},
		{map[string]string{"PATH": "/bin", "HOME": "/h", "EMPTY": ""}, []string{"EMPTY=", "HOME=/h", "PATH=/bin"}},
	}
	for _, tt := range tests {
		if got := environ(tt.env); !slices.Equal(got, tt.want) {
			t.Errorf("environ(%v) = %q, want %q", tt.env, got, tt.want)
		}
	}
}
