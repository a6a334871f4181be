package config

import (
	"errors"
	"fmt"
	"strings"
)

// EnvSet returns the keys environment variables set, each with its
// variable: those of EnvVars whose variable is not empty.
func EnvSet(getenv func(string) string) map[string]string {
	set := map[string]string{}
	for _, v := range EnvVars() {
		if getenv(v.Env) != "" {
			set[v.Key] = v.Env
		}
	}
	return set
}

// NameEnv names the environment variable behind a problem: each of err's
// problems (the parts of an errors.Join) that names a key set reports
// which variable set it, unless it names that variable already. An
// operator reading "agent.keepalive: must be less than …" in a deployment
// whose file has no such key learns where the value came from.
func NameEnv(err error, set map[string]string) error {
	if err == nil || len(set) == 0 {
		return err
	}
	parts := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	}
	out := make([]error, len(parts))
	for i, p := range parts {
		out[i] = nameEnvOne(p, set)
	}
	return errors.Join(out...)
}

func nameEnvOne(err error, set map[string]string) error {
	msg := err.Error()
	var notes []string
	for _, key := range sortedKeys(set) {
		env := set[key]
		if mentionsKey(msg, key) && !strings.Contains(msg, env) {
			notes = append(notes, fmt.Sprintf("%s is set by environment variable %s", key, env))
		}
	}
	if len(notes) == 0 {
		return err
	}
	return fmt.Errorf("%w [%s]", err, strings.Join(notes, "; "))
}

// mentionsKey reports whether msg names key as a whole key: not as the
// start of a longer one (agent.keepalive in agent.keepalive_x) nor the end
// of one (stale_job in agent.stale_job).
func mentionsKey(msg, key string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], key)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(key)
		if (start == 0 || !keyByte(msg[start-1])) && keyEnds(msg, end) {
			return true
		}
		i = start + 1
	}
}

// keyEnds reports whether a key ends at msg[end]: the message ends, or a
// character no key has follows, or a full stop that ends a sentence.
func keyEnds(msg string, end int) bool {
	switch {
	case end == len(msg) || !keyByte(msg[end]):
		return true
	case msg[end] == '.':
		return end+1 == len(msg) || !keyByte(msg[end+1])
	}
	return false
}

func keyByte(b byte) bool {
	return b == '_' || b == '.' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}
