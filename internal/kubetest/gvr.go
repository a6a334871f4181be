package kubetest

import "k8s.io/apimachinery/pkg/runtime/schema"

// SparkApplications is the resource spark-operator serves.
var SparkApplications = schema.GroupVersionResource{Group: "sparkoperator.k8s.io", Version: "v1beta2", Resource: "sparkapplications"}
