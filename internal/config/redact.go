package config

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const redacted = "REDACTED"

var (
	schemeRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	// What a host may look like to be printed from a string that does not
	// parse: names, IP literals, ports, lists of them. Anything else might
	// be a piece of a password.
	safeHostRe = regexp.MustCompile(`^[A-Za-z0-9.:\[\],_-]+$`)
	safeKeyRe  = regexp.MustCompile(`^[a-z_]{1,40}$`)
)

// secretParam reports whether a connection parameter holds a secret
// (password, sslpassword).
func secretParam(key string) bool { return strings.Contains(strings.ToLower(key), "password") }

// RedactURL returns a database URL or keyword/value string that is safe to
// print: every password replaced by REDACTED. A string that does not parse
// is never printed, not even in part where its parts are ambiguous. The
// scheme and host stand in for it when they can be told apart from the
// password, and its length.
func RedactURL(s string) string {
	if s == "" {
		return ""
	}
	d, err := parseDSN(s)
	if err != nil {
		return unparsable(s)
	}
	return d.redacted
}

// dsn is a connection string split far enough to redact and check it.
type dsn struct {
	url      bool
	redacted string
	ports    []string // every port given, as written
}

// parseDSN splits a database URL (postgres:// or postgresql://, as pgx
// tells them apart) or keyword/value string. Its errors never quote s.
func parseDSN(s string) (dsn, error) {
	scheme, _, ok := cutScheme(s)
	if !ok {
		return parseKeywordValue(s)
	}
	switch scheme {
	case "postgres", "postgresql":
		return parseURLForm(s)
	}
	return dsn{}, fmt.Errorf("the scheme must be postgres:// or postgresql://, got %s://", scheme)
}

// cutScheme splits s around its first "://" when what comes before is a URL
// scheme. ok is false when s has none.
func cutScheme(s string) (scheme, rest string, ok bool) {
	scheme, rest, ok = strings.Cut(s, "://")
	return scheme, rest, ok && schemeRe.MatchString(scheme)
}

func parseURLForm(s string) (dsn, error) {
	s, hosts, err := withOneHost(s)
	if err != nil {
		return dsn{}, err
	}
	u, err := url.Parse(s)
	if err != nil {
		// url's errors quote the input. Say what kind of problem only.
		return dsn{}, errors.New("it does not parse as a URL; percent-encode special characters in the user name and password (@ as %40, / as %2F, [ as %5B)")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return dsn{}, errors.New("its query string (after ?) does not parse; percent-encode special characters")
	}
	redactURLSecrets(u, q)
	if hosts != "" {
		u.Host = hosts
	}
	return dsn{url: true, redacted: u.String(), ports: urlPorts(u.Host, q)}, nil
}

// withOneHost puts one placeholder host in place of libpq's (and pgx's)
// list of hosts, "h1:5432,h2:5433", which is not RFC 3986 syntax, so the
// URL parses. It returns the list ("" when there is one host) to put back.
func withOneHost(s string) (string, string, error) {
	scheme, rest, _ := strings.Cut(s, "://")
	authority := upTo(rest, "/?")
	at := strings.LastIndexByte(authority, '@')
	hosts := authority[at+1:]
	if !strings.Contains(hosts, ",") {
		return s, "", nil
	}
	for h := range strings.SplitSeq(hosts, ",") {
		if h != "" && !safeHostRe.MatchString(h) {
			return "", "", errors.New("a host in its list of hosts is not a name, an IP address or [IPv6], with an optional :port")
		}
	}
	return scheme + "://" + authority[:at+1] + "hosts" + rest[len(authority):], hosts, nil
}

// redactURLSecrets replaces the password and every secret query parameter
// of u (whose query is q) with the redaction marker.
func redactURLSecrets(u *url.URL, q url.Values) {
	if _, has := u.User.Password(); has { // false for no user info (nil)
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	touched := false
	for k := range q {
		if secretParam(k) {
			q[k] = []string{redacted}
			touched = true
		}
	}
	if touched {
		u.RawQuery = q.Encode()
	}
}

// urlPorts returns the ports a URL names. pgx reads a list of hosts, each
// with an optional port, and a port parameter.
func urlPorts(hosts string, q url.Values) []string {
	var ports []string
	for h := range strings.SplitSeq(hosts, ",") {
		if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
			ports = append(ports, h[i+1:])
		}
	}
	if p := q.Get("port"); p != "" {
		ports = append(ports, strings.Split(p, ",")...)
	}
	return ports
}

// parseKeywordValue reads "key=value key='quoted value'" as libpq does.
// Values are unquoted runs of non-space characters or single-quoted, and a
// backslash escapes the next character in either.
func parseKeywordValue(s string) (dsn, error) {
	var out []string
	d := dsn{}
	sc := &kvScanner{s: s}
	for sc.skipSpace(); !sc.done(); sc.skipSpace() {
		key, ok := sc.keyword()
		if !ok {
			return dsn{}, fmt.Errorf("it is neither a postgres:// URL nor keyword=value pairs: keyword %d has no =", len(out)+1)
		}
		raw, val, err := sc.value(key)
		if err != nil {
			return dsn{}, err
		}
		if secretParam(key) {
			out = append(out, key+"="+redacted)
		} else {
			out = append(out, key+"="+raw)
		}
		if key == "port" {
			d.ports = append(d.ports, strings.Split(val, ",")...)
		}
	}
	if len(out) == 0 {
		return dsn{}, errors.New("it is empty")
	}
	d.redacted = strings.Join(out, " ")
	return d, nil
}

// kvScanner reads a keyword/value string from left to right.
type kvScanner struct {
	s string
	i int
}

func (sc *kvScanner) done() bool { return sc.i >= len(sc.s) }

// at reports whether the next byte is c.
func (sc *kvScanner) at(c byte) bool { return !sc.done() && sc.s[sc.i] == c }

func (sc *kvScanner) skipSpace() {
	rest := sc.s[sc.i:]
	sc.i += len(rest) - len(strings.TrimLeft(rest, kvSpaces))
}

// keyword reads a keyword and its =, with spaces allowed around the =. ok
// is false when there is no keyword or no =.
func (sc *kvScanner) keyword() (key string, ok bool) {
	key = upTo(sc.s[sc.i:], "="+kvSpaces)
	sc.i += len(key)
	sc.skipSpace()
	if key == "" || !sc.at('=') {
		return key, false
	}
	sc.i++
	sc.skipSpace()
	return key, true
}

// value reads the value of key, quoted or not. It returns it as written
// (raw) and as libpq reads it (val).
func (sc *kvScanner) value(key string) (raw, val string, err error) {
	start := sc.i
	if sc.at('\'') {
		val, err = sc.quoted(key)
	} else {
		val = sc.bare()
	}
	return sc.s[start:sc.i], val, err
}

func (sc *kvScanner) quoted(key string) (string, error) {
	var val strings.Builder
	sc.i++ // the opening quote
	for !sc.done() {
		c := sc.s[sc.i]
		sc.i++
		if c == '\\' && !sc.done() {
			val.WriteByte(sc.s[sc.i])
			sc.i++
			continue
		}
		if c == '\'' {
			return val.String(), nil
		}
		val.WriteByte(c)
	}
	return "", fmt.Errorf("the quoted value of %s is not closed with '", safeKey(key))
}

func (sc *kvScanner) bare() string {
	var val strings.Builder
	for !sc.done() && !isSpace(sc.s[sc.i]) {
		if sc.s[sc.i] == '\\' && sc.i+1 < len(sc.s) {
			sc.i++
		}
		val.WriteByte(sc.s[sc.i])
		sc.i++
	}
	return val.String()
}

// kvSpaces are the spaces libpq skips between keywords and values.
const kvSpaces = " \t\n\r\v\f"

func isSpace(c byte) bool { return strings.IndexByte(kvSpaces, c) >= 0 }

// safeKey quotes a keyword for an error, unless it could be something else
// pasted by mistake.
func safeKey(k string) string {
	if safeKeyRe.MatchString(k) {
		return k
	}
	return "a keyword"
}

// unparsable describes a connection string that does not parse without
// printing it. A password's boundaries are unknown in it.
func unparsable(s string) string {
	var what []string
	if scheme, rest, ok := cutScheme(s); ok {
		what = append(what, scheme+"://")
		if h := unparsableHost(rest); h != "" {
			what = append(what, "host "+h)
		}
	}
	what = append(what, strconv.Itoa(len(s))+" bytes")
	return "<unparsable database_url: " + strings.Join(what, ", ") + ">"
}

// unparsableHost returns the host part of the rest of a URL after "://"
// when it cannot be a piece of the password, else "".
func unparsableHost(rest string) string {
	authority := upTo(rest, "/?#")
	// An @ past the authority means the password may hold a / or ?: no
	// telling where it ends. With no @, no password comes before the host.
	if n := strings.Count(rest, "@"); n > 1 || strings.Count(authority, "@") != n {
		return ""
	}
	host := authority[strings.IndexByte(authority, '@')+1:]
	if !safeHostRe.MatchString(host) {
		return ""
	}
	return host
}

// upTo returns s up to the first of chars, or all of s.
func upTo(s, chars string) string {
	if i := strings.IndexAny(s, chars); i >= 0 {
		return s[:i]
	}
	return s
}

// checkDatabaseURL says why a database URL or keyword/value string would be
// refused by the driver's parser, without quoting it, or returns nil.
func checkDatabaseURL(s string) error {
	d, err := parseDSN(s)
	if err != nil {
		return fmt.Errorf("%s: %w", unparsable(s), err)
	}
	for _, p := range d.ports {
		if !validPort(p, 1) {
			return fmt.Errorf("%s: a port must be a number from 1 to 65535", d.redacted)
		}
	}
	return nil
}

// Redacted returns a copy that is safe to log or print. The database
// password, API tokens and plugin env values are replaced.
func (c *Config) Redacted() *Config {
	r := *c
	r.DatabaseURL = RedactURL(c.DatabaseURL)
	r.DatabaseDirectURL = RedactURL(c.DatabaseDirectURL)
	r.HTTP.Tokens = make([]Token, len(c.HTTP.Tokens))
	for i, t := range c.HTTP.Tokens {
		r.HTTP.Tokens[i] = Token{Name: t.Name, Token: redacted}
	}
	r.Plugins = make(map[string]Plugin, len(c.Plugins))
	for name, p := range c.Plugins {
		env := make(map[string]string, len(p.Env))
		for k := range p.Env {
			env[k] = redacted
		}
		p.Env = env
		p.PassEnv = slices.Clone(p.PassEnv)
		r.Plugins[name] = p
	}
	r.Commands = maps.Clone(c.Commands)
	return &r
}

// LogValue makes slog print a redacted summary.
func (c *Config) LogValue() slog.Value {
	r := c.Redacted()
	tokenNames := make([]string, len(r.HTTP.Tokens))
	for i, t := range r.HTTP.Tokens {
		tokenNames[i] = t.Name
	}
	return slog.GroupValue(
		slog.String("database_url", r.DatabaseURL),
		slog.String("agent.name", r.Agent.Name),
		slog.Int("agent.capacity", r.Agent.Capacity),
		slog.String("agent.poll_interval", r.Agent.PollInterval.String()),
		slog.String("agent.keepalive", r.Agent.Keepalive.String()),
		slog.String("agent.stale_job", r.Agent.StaleJob.String()),
		slog.String("database_direct_url", r.DatabaseDirectURL),
		slog.String("agent.offline_after", r.Agent.OfflineAfter.String()),
		slog.String("agent.dead_after", r.Agent.DeadAfter.String()),
		slog.Bool("agent.name_lock_liveness", r.Agent.LockLiveness()),
		slog.String("agent.clean_interval", r.Agent.CleanInterval.String()),
		slog.String("agent.awol_timeout", r.Agent.AWOLTimeout.String()),
		slog.String("agent.shutdown_timeout", r.Agent.ShutdownTimeout.String()),
		slog.String("http.listen", r.HTTP.Listen),
		slog.Any("http.tokens", tokenNames),
		slog.String("plugin_dir", r.PluginDir),
		slog.Any("plugins", sortedKeys(r.Plugins)),
		slog.Any("commands", r.CommandNames()),
	)
}
