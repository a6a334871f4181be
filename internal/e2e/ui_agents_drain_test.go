package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// The agents page asks a running agent to drain: the Drain button opens a
// confirmation that says what a drain does, "Keep it running" sends
// nothing, the confirmed request is stored with its reason, the row shows
// it, and the real agent drains and stops as on SIGTERM.
func TestConsoleDrainsAnAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), fast())
	br := newBrowser(t)
	target := h.startAgent(ctx, "ui-drained")
	serving := h.startAgent(ctx, "ui-serving", "TETHER_HTTP_LISTEN="+freeAddr(t))
	base := "http://" + h.apiAddr(ctx, serving)

	br.open(base+"/#/agents?all=true", "agents")
	row := `tr[data-agent=ui-drained]`
	br.waitJS("the target's Drain button", fmt.Sprintf(`!!document.querySelector('%s button[data-drain=ui-drained]')`, row))

	// Opened and dismissed: nothing is sent.
	br.click(row + ` button[data-drain=ui-drained]`)
	br.waitJS("the confirmation", `!document.querySelector('[data-testid=drain-form]').hidden`)
	assert.Equal(t, "Drain agent ui-drained?", br.text(`[data-testid=drain-form] legend`))
	assert.Contains(t, br.text(`[data-testid=drain-form]`), "exactly as on SIGTERM")
	checkAccessible(t, br, "agents")
	br.click(`[data-testid=drain-keep]`)
	br.waitJS("the confirmation closed", `document.querySelector('[data-testid=drain-form]').hidden`)
	for _, r := range br.requestsSeen() {
		assert.NotEqual(t, http.MethodPost, r.Method, "dismissing sends nothing: %s", r.URL)
	}

	br.click(row + ` button[data-drain=ui-drained]`)
	br.setValue(`#drain-reason`, "kernel upgrade")
	br.shot("agents-drain.png")
	br.click(`[data-testid=drain-confirm]`)
	br.waitJS("the request's acknowledgement", `(p => p && !p.hidden && p.textContent.includes('Drain requested'))(document.querySelector('[data-testid=drain-ok]'))`)

	var agents struct {
		Agents []struct {
			Name         string `json:"name"`
			State        string `json:"state"`
			DrainRequest *struct {
				Reason string `json:"reason"`
			} `json:"drain_request"`
		} `json:"agents"`
	}
	require.Equal(t, http.StatusOK, apiCall(t, ctx, http.MethodGet, base+"/api/v1/agents?all=true", "", nil, &agents))
	var stored string
	for _, a := range agents.Agents {
		if a.Name == "ui-drained" && a.DrainRequest != nil {
			stored = a.DrainRequest.Reason
		}
	}
	assert.Equal(t, "kernel upgrade", stored, "the console's request is stored with its reason")

	// The real agent reads it at its next heartbeat, drains and exits 0;
	// the row keeps the request (its title names the reason) and loses the
	// button.
	assert.Equal(t, 0, h.waitExit(target, 60*time.Second), "a drained agent exits as after SIGTERM")
	br.waitJS("the stopped agent's row", fmt.Sprintf(`(r => r && r.dataset.state === 'stopped' && r.querySelector('[data-testid=drain-request]').title.includes('kernel upgrade') && !r.querySelector('button[data-drain]'))(document.querySelector('%s'))`, row))
	assert.Equal(t, 1, br.count(`tr[data-agent=ui-serving] button[data-drain=ui-serving]`), "the other agent can still be drained")
}
