package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// drainPoll is how often `agent drain --wait` looks at the agent.
const drainPoll = 500 * time.Millisecond

func (a *app) agentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Act on one agent (drain)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(a.agentDrainCmd())
	return cmd
}

func (a *app) agentDrainCmd() *cobra.Command {
	var (
		req     api.DrainAgentRequest
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain <name>",
		Short: "Ask a running agent to drain, through the database (as SIGTERM does)",
		Long: `Ask a running agent to drain. The request is stored in the database with who
asked and why; the agent reads it with its next heartbeat (within its
agent.keepalive) and drains exactly as on SIGTERM: it claims nothing more,
hands its resumable jobs to other agents or stops them (drain.handoff),
marks itself stopped and exits. Any agent's API takes the request, so the
agent itself need not be reachable. A second request changes nothing.

With --wait it waits until the agent stopped (exit 0), printing its state
changes on stderr; --wait-timeout bounds that (exit 3).`,
		Example: `  tether agent drain agent-7 --reason "kernel upgrade"
  tether agent drain agent-7 --wait --wait-timeout 5m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFollowTimeout(wait, timeout); err != nil {
				return err
			}
			res, err := call(a, func(c *client.Client) (api.DrainAgentResponse, error) {
				return c.DrainAgent(cmd.Context(), args[0], req)
			})
			if err != nil {
				return err
			}
			if err := a.show(res, func() error { return a.printDrain(res) }); err != nil || !wait {
				return err
			}
			ctx, cancel := waitTimeout(cmd.Context(), timeout)
			defer cancel()
			return a.waitStopped(ctx, args[0], res.Agent.State)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Reason, "reason", "", "why; stored with the request and shown by tether agents and the console")
	f.StringVar(&req.By, "by", "", "who asks (ignored with tokens: the token's name is used)")
	f.BoolVar(&wait, "wait", false, "wait until the agent stopped")
	f.DurationVar(&timeout, "wait-timeout", 0, "with --wait: give up (exit 3) after this long; 0 waits as long as the drain takes")
	return cmd
}

func (a *app) printDrain(res api.DrainAgentResponse) error {
	ag := res.Agent
	if !res.Requested {
		fmt.Fprintf(a.stdout, "agent %s: a drain was already requested at %s by %s; it is %s\n",
			ag.Name, fmtTime(&ag.DrainRequest.At), orDash(ag.DrainRequest.By), ag.State)
		return nil
	}
	fmt.Fprintf(a.stdout, "agent %s: drain requested; it drains at its next heartbeat (it holds %d jobs)\n", ag.Name, ag.ActiveJobs)
	return nil
}

// waitStopped polls the agent until it stopped, printing state changes on
// stderr.
func (a *app) waitStopped(ctx context.Context, name, state string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return &exitError{code: exitUnknown, err: fmt.Errorf("stopped waiting; agent %s was %s and goes on draining", name, state)}
		case <-t.C:
		}
		agents, err := c.ListAgents(ctx, true)
		if err != nil {
			fmt.Fprintf(a.stderr, "tether: %v; trying again\n", err)
			continue
		}
		now, found := findAgent(agents, name)
		switch {
		case !found:
			return fmt.Errorf("agent %s is gone from the agents list (pruned)", name)
		case now.State != state:
			state = now.State
			fmt.Fprintf(a.stderr, "agent %s: %s (%d jobs)\n", name, state, now.ActiveJobs)
		}
		if state == "stopped" {
			return nil
		}
	}
}

func findAgent(agents []api.Agent, name string) (api.Agent, bool) {
	for _, ag := range agents {
		if ag.Name == name {
			return ag, true
		}
	}
	return api.Agent{}, false
}
