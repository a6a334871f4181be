// Command tether-plugin-ecs is tether's ECS plugin. It runs jobs as Amazon ECS
// tasks and follows them to the end, across agents. The agent starts it. It is
// not meant to be run by hand.
package main

import (
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

func main() {
	plugin.Serve(ecs.New())
}
