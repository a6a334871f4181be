// Command tether-plugin-shell is tether's shell plugin. It runs jobs as local
// processes. The agent starts it. It is not meant to be run by hand.
package main

import (
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/plugins/shell/shell"
)

func main() {
	plugin.Serve(shell.New())
}
