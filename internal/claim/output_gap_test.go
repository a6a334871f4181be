package claim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// gapPlugin is a resumable plugin in the test's hands. Execute writes line
// 1 and checkpoints h1, waits for the test, writes line 2, then checkpoints
// h2 (when checkpointAgain) and succeeds.
type gapPlugin struct {
	checkpointAgain bool
	checkpointed    chan struct{}
	goOn            chan struct{}
	secondErr       chan error
}

func (p *gapPlugin) Info(string) (plugin.Info, bool) {
	return plugin.Info{Name: "scripted", Capabilities: []string{plugin.CapResume}}, true
}

func (p *gapPlugin) Execute(ctx context.Context, _ string, _ *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	_, _ = rt.Stdout().Write([]byte("line 1\n"))
	if err := rt.Checkpoint(ctx, []byte("h1")); err != nil {
		return nil, err
	}
	close(p.checkpointed)
	<-p.goOn
	_, _ = rt.Stdout().Write([]byte("line 2\n"))
	if p.checkpointAgain {
		err := rt.Checkpoint(ctx, []byte("h2"))
		p.secondErr <- err
		if err != nil {
			return nil, err
		}
	}
	return &plugin.Result{Message: "done"}, nil
}

func (p *gapPlugin) Resume(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	return nil, plugin.Errorf(plugin.Permanent, "not in this test")
}

func (p *gapPlugin) Cleanup(context.Context, string, *plugin.Job) error { return nil }
func (p *gapPlugin) Renew(context.Context, time.Duration)               {}

// loseHistorySince makes the database look like a standby promoted before
// the runner's last checkpoint reached it: its output and handle are those
// of the checkpoint before (none: no output, no handle).
func loseHistorySince(t *testing.T, st *store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	_, err := st.Pool().Exec(ctx, `DELETE FROM job_logs WHERE job_id = $1`, id)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET log_seq = 0, stdout_bytes = 0, handle = NULL WHERE job_id = $1`, id)
	require.NoError(t, err)
}

// TestWritesPastLostOutputReleaseTheJob covers a resumable runner whose
// checkpoint or end was prepared before the database lost its newest
// history and reaches it after (held in a reconnect, or sent before the
// reconcile noticed). Stored, it would point past output that is gone and
// the resume would begin after it. The database refuses it (ErrOutputGap)
// and the runner releases the job to be resumed from the checkpoint the
// database kept, whose plugin writes the lost output again.
func TestWritesPastLostOutputReleaseTheJob(t *testing.T) {
	for _, tc := range []struct {
		name            string
		checkpointAgain bool
	}{
		{"a checkpoint", true},
		{"the end", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &gapPlugin{checkpointAgain: tc.checkpointAgain, checkpointed: make(chan struct{}), goOn: make(chan struct{}), secondErr: make(chan error, 1)}
			f := newExecutorFixture(t, p)
			j := f.claimAs(t, true)
			done := f.run(j)
			waitOrTimeout(t, p.checkpointed, "first checkpoint")
			loseHistorySince(t, f.st, j.key.ID)
			close(p.goOn)
			if tc.checkpointAgain {
				err := waitOrTimeout(t, p.secondErr, "second checkpoint")
				require.Error(t, err, "the checkpoint past the gap is refused")
				assert.Equal(t, plugin.Retriable, plugin.ClassOf(err))
			}
			e := waitOrTimeout(t, f.ended, "end")
			<-done
			assert.Equal(t, Ended{JobID: j.key.ID, Lease: j.key.Lease, Status: "released", Error: historyResumeReason}, e)

			ctx := context.Background()
			var handle []byte
			var resume bool
			var holder *string
			require.NoError(t, f.st.Pool().QueryRow(ctx, `SELECT handle, resume, agent_name FROM active_jobs WHERE job_id = $1`, j.key.ID).Scan(&handle, &resume, &holder))
			assert.True(t, resume, "released to be resumed")
			assert.Nil(t, holder, "by nobody yet")
			assert.Nil(t, handle, "from the checkpoint the database kept")
			chunks, err := f.st.Logs(ctx, j.key.ID, "stdout", 0, 0)
			require.NoError(t, err)
			assert.Empty(t, chunks, "no line stored after the gap")
		})
	}
}
