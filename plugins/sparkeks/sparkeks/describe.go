package sparkeks

import (
	"github.com/tetherjobs/tether/pkg/plugin"
)

var _ plugin.Describer = (*Plugin)(nil)

// Describe implements plugin.Describer from the handle alone: the job's
// SparkApplication (kubeflow spark-operator's kind SparkApplication, group
// sparkoperator.k8s.io) and, once known, its driver pod. There are no
// console links. An EKS cluster's API has no web page to point at, and a
// person reaches it with kubectl in a context of their own.
func (p *Plugin) Describe(_ *plugin.Job, handle []byte) []plugin.Resource {
	h, err := decodeHandle(handle)
	if err != nil || h.Name == "" || h.Namespace == "" {
		return nil
	}
	ns := plugin.ShellQuote(h.Namespace)
	label := "Spark application" + ifSet(" ", h.SparkApplicationID, "")
	out := []plugin.Resource{{
		Kind:    "spark_application",
		Name:    h.Namespace + "/" + h.Name,
		Label:   label,
		Command: "kubectl -n " + ns + " get sparkapplication " + plugin.ShellQuote(h.Name) + " -o yaml",
	}}
	if h.DriverPod != "" {
		out = append(out, plugin.Resource{
			Kind:    "kubernetes_pod",
			Name:    h.Namespace + "/" + h.DriverPod,
			Label:   "Spark driver pod",
			Command: "kubectl -n " + ns + " logs -f " + plugin.ShellQuote(h.DriverPod),
		})
	}
	return out
}
