package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHostPolicy(t *testing.T) {
	type hc struct {
		host string
		want bool
	}
	for _, tc := range []struct {
		name    string
		allowed []string
		listen  string
		tokens  bool
		hosts   []hc
	}{
		{"defaults", nil, ":9090", false, []hc{
			{"127.0.0.1:9090", true}, {"127.0.0.1", true}, {"10.1.2.3:80", true}, {"[::1]:9090", true}, {"[::1]", true},
			{"::1", true}, {"[fe80::1%25eth0]:9090", true}, {"localhost:9090", true}, {"LOCALHOST", true},
			{"localhost.", true}, {"dev.localhost:1", true}, {"", true},
			{"evil.example", false}, {"evil.example:9090", false}, {"localhost.evil.example", false},
			{"127.0.0.1.evil.example", false}, {"agent.internal:9090", false}, {"xlocalhost", false},
		}},
		{"listen name", nil, "agent.internal:9090", false, []hc{
			{"agent.internal:9090", true}, {"AGENT.internal:1234", true}, {"agent.internal", true},
			{"other.internal:9090", false},
		}},
		{"listen ip", nil, "10.0.0.5:9090", false, []hc{{"10.0.0.5:9090", true}, {"evil.example", false}}},
		{"entries", []string{"Tether.Example.com", "api.example.com:8443", "[2001:db8::1]"}, ":9090", false, []hc{
			{"tether.example.com", true}, {"tether.example.com:9090", true}, {"TETHER.EXAMPLE.COM:1", true},
			{"api.example.com:8443", true}, {"api.example.com:9090", false}, {"api.example.com", false},
			{"example.com", false}, {"x.tether.example.com", false}, {"127.0.0.1", true},
		}},
		{"star", []string{"*"}, ":9090", false, []hc{{"anything.example:1", true}}},
		{"tokens without a list", nil, ":9090", true, []hc{{"anything.example:1", true}}},
		{"tokens with a list", []string{"a.example"}, ":9090", true, []hc{{"a.example", true}, {"b.example", false}}},
	} {
		p := newHostPolicy(tc.allowed, tc.listen, tc.tokens)
		for _, h := range tc.hosts {
			assert.Equal(t, h.want, p.allowedHost(h.host), "%s: Host %q", tc.name, h.host)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	s := &server{hosts: newHostPolicy([]string{"ui.example.com"}, ":9090", false)}
	for _, tc := range []struct {
		origin, host string
		want         bool
	}{
		{"http://127.0.0.1:9090", "127.0.0.1:9090", true},
		{"https://agent.example:9090", "AGENT.example:9090", true},
		{"http://ui.example.com", "127.0.0.1:9090", true},
		{"https://ui.example.com:8443", "127.0.0.1:9090", true},
		{"null", "127.0.0.1:9090", false},
		{"http://127.0.0.1:9091", "127.0.0.1:9090", false},
		{"http://localhost:9090", "127.0.0.1:9090", false},
		{"http://evil.example", "127.0.0.1:9090", false},
		{"file://", "127.0.0.1:9090", false},
		{"ftp://127.0.0.1:9090", "127.0.0.1:9090", false},
		{"http://user@127.0.0.1:9090", "127.0.0.1:9090", false},
		{"http://127.0.0.1:9090/path", "127.0.0.1:9090", false},
		{"%zz", "127.0.0.1:9090", false},
	} {
		assert.Equal(t, tc.want, s.sameOrigin(tc.origin, tc.host), "Origin %q Host %q", tc.origin, tc.host)
	}
}

func TestJSONContentType(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string // "" = accepted, else a part of the reason
	}{
		{[]string{"application/json"}, ""},
		{[]string{"Application/JSON; charset=UTF-8"}, ""},
		{[]string{"application/json;charset=utf-8"}, ""},
		{nil, "missing"},
		{[]string{""}, "malformed"},
		{[]string{"text/plain"}, "not application/json"},
		{[]string{"application/x-www-form-urlencoded"}, "not application/json"},
		{[]string{"multipart/form-data; boundary=x"}, "not application/json"},
		{[]string{"application/json-patch+json"}, "not application/json"},
		{[]string{"application/json; charset=latin1"}, "not utf-8"},
		{[]string{"application/json", "text/plain"}, "more than once"},
		{[]string{"application/json;;"}, "malformed"},
	} {
		got := jsonContentType(tc.values)
		if tc.want == "" {
			assert.Empty(t, got, "%q", tc.values)
		} else {
			assert.Contains(t, got, tc.want, "%q", tc.values)
		}
	}
}

func TestCheckRawString(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
	}{
		{`"plain"`, ""},
		{`"\ud83d\ude00 pair"`, ""},
		{`"\u00e9\n\t\\u0000"`, ""}, // an escaped backslash, then text
		{`, "\"quoted\""`, ""},
		{`"\u0000"`, "NUL"},
		{`"\ud800"`, "lone surrogate"},
		{`"\uDBFF\u0041"`, "lone surrogate"},
		{`"\udc00"`, "lone surrogate"},
		{`"\ud83d\ude00\udc00"`, "lone surrogate"},
		{"\"\xff\"", "not valid UTF-8"},
		{"\"\xc0\x80\"", "not valid UTF-8"},
		{"\"\xed\xa0\x80\"", "not valid UTF-8"}, // a surrogate in raw UTF-8
	} {
		got := checkRawString([]byte(tc.raw))
		if tc.want == "" {
			assert.Empty(t, got, tc.raw)
		} else {
			assert.Contains(t, got, tc.want, tc.raw)
		}
	}
}

func TestCheckNumber(t *testing.T) {
	for _, tc := range []struct {
		n  string
		ok bool
	}{
		{"1", true}, {"-0", true}, {"1.5e300", true}, {"1.7976931348623157e308", true}, {"1e-400", true},
		{"1e-16383", true}, {"1.00000000000000000000001", true}, {"0." + strings.Repeat("1", 16383), true},
		{"1e400", false}, {"-1e309", false}, {"1e-16384", false}, {"0." + strings.Repeat("1", 16384), false},
		{"1e-99999999999999999999", false}, {"1" + strings.Repeat("0", 400), false},
		{"0e16383", true}, {"0e16384", false}, {"0e2147483648", false}, {"0e99999999999999999999", false}, {"1E+2", true},
	} {
		assert.Equal(t, tc.ok, checkNumber(tc.n) == "", "%.40s: %s", tc.n, checkNumber(tc.n))
	}
}

func TestCheckBodyPaths(t *testing.T) {
	for _, tc := range []struct {
		body, field string
	}{
		{`{"command":"a\u0000"}`, "command"},
		{`{"context":{"env":{"HOME":"\ud800"}}}`, "context.env.HOME"},
		{`{"context":{"list":[1,"x",{"k":"\u0000"}]}}`, "context.list[2].k"},
		{`{"context":{"a":{"b\u0000":1}}}`, "context.a"},
		{`{"context":{"n":[1e400]}}`, "context.n[0]"},
		{`{"limits":{"active_timeout":"1\u0000s"}}`, "limits.active_timeout"},
		{`{"max":1e400}`, ""}, // outside context: decoding reports it
		{`{"context":{"a":"ok"},"x":`, ""},
		{`{"context":{"a":"\ud83d\ude00"}}`, ""},
	} {
		err := checkBody([]byte(tc.body))
		if tc.field == "" {
			assert.Nil(t, err, tc.body)
			continue
		}
		if assert.NotNil(t, err, tc.body) {
			assert.Equal(t, tc.field, err.Field, tc.body)
		}
	}
}
