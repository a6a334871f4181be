package migrate

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/queries"
)

func TestPlan(t *testing.T) {
	known := []queries.Migration{{Version: 1}, {Version: 2}, {Version: 3, Compatible: true}}
	for _, tc := range []struct {
		name                 string
		breaking, compatible int
		current              int
		pending              []int
		tooNew               bool
	}{
		{name: "empty database", current: 0, pending: []int{1, 2, 3}},
		{name: "behind by a compatible one", breaking: 2, current: 2, pending: []int{3}},
		{name: "current", breaking: 2, compatible: 3, current: 3},
		{name: "ahead by compatible ones only: runs on it", breaking: 2, compatible: 5, current: 5},
		{name: "ahead by a breaking one: too new", breaking: 4, compatible: 3, current: 4, tooNew: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current, pending, err := plan(known, tc.breaking, tc.compatible)
			assert.Equal(t, tc.current, current)
			var versions []int
			for _, m := range pending {
				versions = append(versions, m.Version)
			}
			assert.Equal(t, tc.pending, versions)
			assert.Equal(t, tc.tooNew, IsTooNew(err), "err: %v", err)
		})
	}
}
