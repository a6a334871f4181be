package jobctx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMerge(t *testing.T) {
	for _, tc := range []struct{ defaults, job, want string }{
		{"", "", `{}`},
		{"null", "null", `{}`},
		{"", `{"a":1}`, `{"a":1}`},
		{`{"a":1,"b":{"x":1}}`, "", `{"a":1,"b":{"x":1}}`},
		{`{"a":1,"b":{"x":1}}`, `{"b":{"y":2},"c":3}`, `{"a":1,"b":{"y":2},"c":3}`},
	} {
		got, err := Merge([]byte(tc.defaults), []byte(tc.job))
		require.NoError(t, err)
		assert.JSONEq(t, tc.want, string(got), "%s + %s", tc.defaults, tc.job)
	}
	_, err := Merge([]byte(`[1]`), nil)
	assert.ErrorContains(t, err, "command default context")
	_, err = Merge([]byte(`{}`), []byte(`"x"`))
	assert.ErrorContains(t, err, "job context")
}
