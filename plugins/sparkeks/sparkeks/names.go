package sparkeks

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The SparkApplication resource, as kubeflow spark-operator defines it.
const (
	Group      = "sparkoperator.k8s.io"
	Version1   = "v1beta2"
	APIVersion = Group + "/" + Version1
	Kind       = "SparkApplication"
	Resource   = "sparkapplications"
)

// Labels tether puts on the SparkApplication and its ConfigMap.
const (
	labelManagedBy  = "app.kubernetes.io/managed-by"
	labelJobID      = "tether.dev/job-id"
	labelJobAttempt = "tether.dev/job-attempt"
	labelCommand    = "tether.dev/command"
	managedByTether = "tether"
)

// queryVolume is the name of the volume the query's ConfigMap is mounted from.
const queryVolume = "tether-query"

// AppName is the SparkApplication of a job. Every attempt and every agent
// derives the same name, which is how Resume and Cleanup find it.
func AppName(jobID string) string { return "spark-sql-job-" + jobID }

// ConfigMapName is the ConfigMap holding a job's query.
func ConfigMapName(jobID string) string { return AppName(jobID) + "-query" }

// checkNames fails when the job ID does not make valid Kubernetes names
// (job IDs are lowercase UUIDs, which do).
func checkNames(jobID string) error {
	for _, n := range []string{AppName(jobID), ConfigMapName(jobID)} {
		if err := invalid(validation.IsDNS1123Label(n), "job ID %q gives the name %q, which Kubernetes refuses (%s); job IDs must be lowercase UUIDs", jobID, n); err != nil {
			return err
		}
	}
	return nil
}

func typesUID(s string) types.UID { return types.UID(s) }
