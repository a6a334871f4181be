package client

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A follower reconnecting mid-chunk neither loses nor repeats a line.
func TestLogCursor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start int64
		// connections: the seqs each one delivered before it was cut
		conns [][]int64
		want  []int64 // admitted, in order
		after []int64 // after= of each connection
	}{
		{name: "whole chunks", conns: [][]int64{{1, 2}, {3, 4}}, want: []int64{1, 2, 3, 4}, after: []int64{0, 1}},
		{name: "cut inside a chunk", conns: [][]int64{{1, 2, 2}, {2, 2, 2, 3}}, want: []int64{1, 2, 2, 2, 3}, after: []int64{0, 1}},
		{name: "cut twice in one chunk", conns: [][]int64{{5, 5}, {5, 5, 5}, {5, 5, 5, 5, 6}}, want: []int64{5, 5, 5, 5, 6}, after: []int64{0, 0, 0}},
		{name: "a server repeating old chunks", conns: [][]int64{{1, 2}, {1, 2, 3}}, want: []int64{1, 2, 3}, after: []int64{0, 1}},
		{name: "starting after", start: 7, conns: [][]int64{{7, 8}}, want: []int64{8}, after: []int64{7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &logCursor{done: tc.start}
			var got, after []int64
			for _, conn := range tc.conns {
				after = append(after, c.reconnect())
				for _, seq := range conn {
					if c.admit(seq) {
						got = append(got, seq)
					}
				}
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.after, after)
		})
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp: connection refused"), true},
		{ErrStreamCut, true},
		{&APIError{Status: http.StatusServiceUnavailable}, true},
		{&APIError{Status: http.StatusTooManyRequests}, true},
		{&APIError{Status: http.StatusNotFound}, false},
		{&APIError{Status: http.StatusBadRequest}, false},
		{fmt.Errorf("wrapped: %w", &APIError{Status: http.StatusBadGateway}), true},
		{nil, false},
	} {
		assert.Equal(t, tc.want, Retryable(tc.err), "%v", tc.err)
	}
}
