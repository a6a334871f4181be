package api

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/store"
)

func TestLastLines(t *testing.T) {
	chunks := []store.LogChunk{
		{Seq: 1, Data: []byte("a\nb\n")},
		{Seq: 2, Data: []byte("c\n")},
		{Seq: 3, Data: []byte("d\ne")}, // ends with a partial line
	}
	data := func(cs []store.LogChunk) []string {
		var out []string
		for _, c := range cs {
			out = append(out, string(c.Data))
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{1, []string{"e"}},
		{2, []string{"d\ne"}},
		{3, []string{"c\n", "d\ne"}},
		{4, []string{"b\n", "c\n", "d\ne"}},
		{5, []string{"a\nb\n", "c\n", "d\ne"}},
		{100, []string{"a\nb\n", "c\n", "d\ne"}},
	} {
		assert.Equal(t, tc.want, data(lastLines(append([]store.LogChunk(nil), chunks...), tc.n)), "tail %d", tc.n)
	}
	assert.Empty(t, lastLines(nil, 3))
	assert.Equal(t, "a\nb\n", string(chunks[0].Data), "the chunks read are not changed")
}
