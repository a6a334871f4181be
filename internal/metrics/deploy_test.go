package metrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/metrics"
)

// synthesized are the series Prometheus itself writes for every target.
var synthesized = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// promqlFunctions are the functions and aggregations the deploy files may
// call. Anything else followed by "(" is an error, so a misspelt metric
// cannot hide as a function.
var promqlFunctions = []string{
	"abs", "absent", "avg", "avg_over_time", "bottomk", "ceil", "clamp_max", "clamp_min", "count",
	"count_over_time", "delta", "deriv", "floor", "histogram_quantile", "increase", "irate",
	"label_values", "max", "max_over_time", "min", "min_over_time", "quantile", "rate", "round",
	"scalar", "stddev", "sum", "sum_over_time", "time", "topk", "vector",
}

// Keywords taking a label list in parentheses, and plain keywords.
var (
	labelListKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	keywords          = []string{"and", "or", "unless", "bool", "offset"}
)

// exportedNames are the metric families an agent registers: its own and
// the janitor's (registered on the same Metrics), series or not.
func exportedNames(t *testing.T) []string {
	t.Helper()
	m := metrics.New()
	janitor.New(nil, nil, janitor.Config{Metrics: m}) // registers, touches nothing until Run
	names := m.Names()
	require.Contains(t, names, "tether_queue_jobs")
	require.Contains(t, names, "tether_janitor_actions_total", "the janitor's metrics are listed")
	require.Contains(t, names, "go_goroutines")
	return names
}

// metricNames returns the metric names a PromQL expression selects. It
// skips strings, label matchers {…}, ranges […], Grafana variables ($x) and
// the label lists of by/without/on/ignoring, and refuses an unknown function.
func metricNames(expr string) ([]string, error) {
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	skipString := func(i int) int { // i at the opening quote; returns the index after the closing one
		q := expr[i]
		for i++; i < len(expr) && expr[i] != q; i++ {
			if expr[i] == '\\' && q != '`' {
				i++
			}
		}
		return i + 1
	}
	skipTo := func(i int, open, close byte) int { // i at open; returns the index after the matching close
		depth := 0
		for i < len(expr) {
			switch c := expr[i]; {
			case c == '"' || c == '\'' || c == '`':
				i = skipString(i)
				continue
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	var names []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(i)
		case c == '{':
			i = skipTo(i, '{', '}')
		case c == '[':
			i = skipTo(i, '[', ']')
		case c == '$' || c >= '0' && c <= '9' || c == '.':
			// A variable, a number or a duration.
			for i++; i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.'); i++ {
			}
		case isIdent(c, true):
			start := i
			for i < len(expr) && isIdent(expr[i], false) {
				i++
			}
			word := expr[start:i]
			next := i
			for next < len(expr) && expr[next] == ' ' {
				next++
			}
			call := next < len(expr) && expr[next] == '('
			switch {
			case slices.Contains(labelListKeywords, word):
				if call {
					i = skipTo(next, '(', ')')
				}
			case slices.Contains(keywords, word):
			case slices.Contains(promqlFunctions, word):
				// A call, or an aggregation whose by (…) comes first.
			case call:
				return nil, fmt.Errorf("unknown function %s( in %q", word, expr)
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names, nil
}

// unknownNames are the names in expr that are neither exported (a
// histogram's _bucket, _sum and _count series included) nor synthesized.
func unknownNames(expr string, exported []string) ([]string, error) {
	names, err := metricNames(expr)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no metric in %q", expr)
	}
	var unknown []string
	for _, n := range names {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && slices.Contains(exported, b) {
				base = b
			}
		}
		if !slices.Contains(exported, base) && !slices.Contains(synthesized, base) {
			unknown = append(unknown, n)
		}
	}
	return unknown, nil
}

func TestMetricNamesTokenizer(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="tether"} == 0`, []string{"up"}},
		{`max by (command) (tether_queue_oldest_seconds{command=~"$command"}) > 900`, []string{"tether_queue_oldest_seconds"}},
		{`histogram_quantile(0.99, sum by (command, le) (rate(tether_claim_latency_seconds_bucket[$__rate_interval])))`, []string{"tether_claim_latency_seconds_bucket"}},
		{`sum(rate(a_total{code=~"5..", x="}"}[5m])) / sum(rate(b_total[5m])) > 0.05 and on (instance) c offset 1h`, []string{"a_total", "b_total", "c"}},
		{`label_values(tether_queue_jobs, command)`, []string{"tether_queue_jobs", "command"}},
	} {
		got, err := metricNames(tc.expr)
		require.NoError(t, err, tc.expr)
		assert.Equal(t, tc.want, got, tc.expr)
	}
	_, err := metricNames(`sum(ratee(tether_queue_jobs[5m]))`)
	assert.ErrorContains(t, err, "unknown function ratee(")

	exported := []string{"tether_claim_latency_seconds", "tether_queue_jobs"}
	unknown, err := unknownNames(`histogram_quantile(0.5, rate(tether_claim_latency_seconds_bucket[5m])) + tether_queue_job`, exported)
	require.NoError(t, err)
	assert.Equal(t, []string{"tether_queue_job"}, unknown, "a misspelt name is caught, a histogram series is not")
}

// Every metric the Grafana dashboard's queries and variables name is one
// the agent exports.
func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	exported := exportedNames(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana-dashboard.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	exprs := 0
	check := func(where, expr string) {
		t.Helper()
		exprs++
		unknown, err := unknownNames(expr, exported)
		if assert.NoError(t, err, where) {
			assert.Empty(t, unknown, "%s: %q names metrics the agent does not export", where, expr)
		}
	}
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		expr, _ := q["query"].(string)
		// label_values(metric, label). Only the metric is a name.
		metric, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(expr, "label_values("), ")"), ",")
		check("variable "+v.Name, metric)
	}
	assert.Greater(t, exprs, 10)
}

// Every metric the alert rules' expressions name is one the agent exports
// (promtool check rules, in `make test`, checks their syntax).
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	exported := exportedNames(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus-alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			unknown, err := unknownNames(r.Expr, exported)
			if assert.NoError(t, err, r.Alert) {
				assert.Empty(t, unknown, "alert %s: %q names metrics the agent does not export", r.Alert, r.Expr)
			}
		}
	}
	for _, want := range []string{"TetherQueueTooOld", "TetherCommandUnserved", "TetherLeaseLosses", "TetherCleanupBacklogGrowing",
		"TetherCleanupStuck", "TetherPluginRestartLoop", "TetherPluginUnhealthy", "TetherAgentDown", "TetherAgentUnreachable", "TetherNoAgent", "TetherHTTP5xx"} {
		assert.Contains(t, alerts, want)
	}
}
