// Command tether-plugin-sparkeks is tether's Spark-on-Kubernetes plugin. It
// runs Spark SQL jobs as SparkApplications (kubeflow spark-operator) and
// follows them to the end, across agents. The agent starts it. It is not
// meant to be run by hand.
package main

import (
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/plugins/sparkeks/sparkeks"
)

func main() {
	plugin.Serve(sparkeks.New())
}
