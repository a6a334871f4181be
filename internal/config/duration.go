package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tetherjobs/tether/internal/limits"
)

// Duration is a time.Duration written as a Go duration string ("90s", "5m")
// in YAML and environment variables. "0" is accepted. A bare integer such as
// 30 is rejected because its unit would be a guess.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration parses a Go duration string, "0", or whole days ("7d",
// "1d12h").
func ParseDuration(s string) (Duration, error) {
	v, err := limits.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	return Duration(v), nil
}

// UnmarshalYAML accepts duration strings. checkNode reports the same problems
// with the key's path before decoding. This is the backstop.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := durationNode(n)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// durationNode reads a YAML value meant as a duration, or says what is
// wrong with it.
func durationNode(n *yaml.Node) (Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("use a duration string like \"5s\"")
	}
	if numberTag(n) {
		if n.Value == "0" {
			return 0, nil
		}
		return 0, fmt.Errorf("use a duration string like \"5s\" (a bare number %s has no unit)", n.Value)
	}
	return ParseDuration(n.Value)
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalText writes the duration string (JSON, logs).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
