package janitor

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (f *fixture) agentNames() []string {
	f.t.Helper()
	var names []string
	rows, err := f.pool.Query(f.ctx, `SELECT name FROM agents ORDER BY name`)
	require.NoError(f.t, err)
	for rows.Next() {
		var n string
		require.NoError(f.t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(f.t, rows.Err())
	return names
}

func TestPruneAgents(t *testing.T) {
	f := newFixture(t)
	me := f.agent("me", "me-g1", nil)
	stoppedLongAgo := f.agent("stopped-old", "g1", nil)
	require.NoError(t, f.st.SetAgentState(f.ctx, stoppedLongAgo, "stopped"))
	f.agentSilence("stopped-old", 25*time.Hour)
	f.agent("silent-old", "g1", nil)
	f.agentSilence("silent-old", 25*time.Hour)
	holder := f.agent("silent-holding", "g1", nil)
	f.claimed(holder, "c", "sh", true)
	f.agentSilence("silent-holding", 48*time.Hour)
	stoppedRecently := f.agent("stopped-recent", "g1", nil)
	require.NoError(t, f.st.SetAgentState(f.ctx, stoppedRecently, "stopped"))
	f.agentSilence("stopped-recent", 23*time.Hour)

	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: me})
	assert.Equal(t, DefaultAgentRetention, svc.cfg.AgentRetention)
	pruned, err := svc.PruneAgents(f.ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"silent-old", "stopped-old"}, pruned)
	assert.Equal(t, []string{"me", "silent-holding", "stopped-recent"}, f.agentNames(),
		"an agent holding a job is kept however long it is silent")

	// A shorter retention, configured. A pass prunes too.
	svc = New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: me, AgentRetention: time.Hour})
	f.agent("silent-2h", "g1", nil)
	f.agentSilence("silent-2h", 2*time.Hour)
	_, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	names := f.agentNames()
	assert.False(t, slices.Contains(names, "stopped-recent"))
	assert.False(t, slices.Contains(names, "silent-2h"))
	assert.True(t, slices.Contains(names, "me"))
}

func TestPruneAgentsIsBounded(t *testing.T) {
	f := newFixture(t)
	me := f.agent("me", "me-g1", nil)
	for i := range agentPruneBatch + 20 {
		f.agent(fmt.Sprintf("old-%03d", i), "g1", nil)
	}
	f.exec(`UPDATE agents SET last_seen = now() - interval '30 days', state = 'stopped' WHERE name LIKE 'old-%'`)
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: me})
	pruned, err := svc.PruneAgents(f.ctx)
	require.NoError(t, err)
	assert.Len(t, pruned, agentPruneBatch)
	pruned, err = svc.PruneAgents(f.ctx)
	require.NoError(t, err)
	assert.Len(t, pruned, 20)
	assert.Equal(t, []string{"me"}, f.agentNames())
}
