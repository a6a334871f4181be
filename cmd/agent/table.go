package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
)

// humanDuration renders a duration as kubectl's AGE column does: two
// units at most, coarser the longer it is (45s, 3m20s, 42m, 5h10m, 30h,
// 3d4h, 200d).
func humanDuration(d time.Duration) string {
	d = max(d, 0)
	s, m, h := int64(d/time.Second), int64(d/time.Minute), int64(d/time.Hour)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", s)
	case d < 10*time.Minute:
		return fmt.Sprintf("%dm%ds", m, s%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", m)
	case d < 8*time.Hour:
		return fmt.Sprintf("%dh%dm", h, m%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", h)
	case d < 8*24*time.Hour:
		return fmt.Sprintf("%dd%dh", h/24, h%24)
	default:
		return fmt.Sprintf("%dd", h/24)
	}
}

// jobDuration is how long the job has run: from its start to its end, or
// to now while it runs. "-" before it started.
func jobDuration(j api.Job, now time.Time) string {
	if j.StartedAt == nil {
		return "-"
	}
	end := now
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	}
	return humanDuration(end.Sub(*j.StartedAt))
}

// messageLines splits a message into its lines, without trailing blank
// ones or carriage returns.
func messageLines(msg string) []string {
	lines := strings.Split(strings.TrimRight(msg, " \t\r\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return lines
}

// oneLine puts a multi-line value in one table cell: its lines joined by
// " ⏎ ", so every row of a list stays one line.
func oneLine(s string) string {
	return strings.Join(messageLines(s), " ⏎ ")
}

// hangingLines writes prefix and the first line of msg, and every further
// line indented to prefix's width, so a multi-line message stays in its
// column.
func hangingLines(w io.Writer, prefix, msg string) error {
	indent := strings.Repeat(" ", len([]rune(prefix)))
	for i, l := range messageLines(msg) {
		p := prefix
		if i > 0 {
			p = indent
		}
		if _, err := fmt.Fprintln(w, strings.TrimRight(p+l, " ")); err != nil {
			return err
		}
	}
	return nil
}
