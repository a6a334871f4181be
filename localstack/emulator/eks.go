package emulator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// eksCluster is an EKS cluster a test registered. The emulator runs no
// Kubernetes. The endpoint is whatever API server the test points it at.
type eksCluster struct {
	name     string
	status   string
	endpoint string
	caData   string // base64, as DescribeCluster returns it
	version  string
	created  time.Time
}

// eksVersion is the Kubernetes version DescribeCluster reports.
const eksVersion = "1.33"

// PutEKSCluster registers (or replaces) an ACTIVE EKS cluster that
// DescribeCluster returns. endpoint is its API server URL, caData its
// base64-encoded certificate authority data.
func (e *Emulator) PutEKSCluster(name, endpoint, caData string) {
	e.putEKSCluster(name, endpoint, caData, "ACTIVE")
}

// SetEKSClusterStatus changes a registered cluster's status (CREATING,
// ACTIVE, DELETING, FAILED, UPDATING, PENDING). It reports whether the
// cluster exists.
func (e *Emulator) SetEKSClusterStatus(name, status string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.eks[name]
	if ok {
		c.status = status
		e.eks[name] = c
	}
	return ok
}

// DeleteEKSCluster forgets a cluster. DescribeCluster answers
// ResourceNotFoundException again.
func (e *Emulator) DeleteEKSCluster(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.eks, name)
}

func (e *Emulator) putEKSCluster(name, endpoint, caData, status string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.eks[name] = eksCluster{name: name, status: status, endpoint: endpoint, caData: caData, version: eksVersion, created: time.Now()}
}

// handleDescribeEKSCluster is EKS DescribeCluster: GET /clusters/{name}.
func (e *Emulator) handleDescribeEKSCluster(w http.ResponseWriter, r *http.Request) {
	fault, ok := e.injectFault(r, "eks", "DescribeCluster")
	if !ok {
		return
	}
	if fault != nil {
		writeRESTError(w, fault)
		return
	}
	name := r.PathValue("name")
	e.mu.Lock()
	c, found := e.eks[name] // a copy, read without the lock below
	e.mu.Unlock()
	if !found {
		e.log.Debug("aws request failed", "op", "DescribeCluster", "type", "ResourceNotFoundException", "cluster", name)
		writeRESTError(w, &apiError{status: http.StatusNotFound, typ: "ResourceNotFoundException", msg: fmt.Sprintf("No cluster found for name: %s.", name)})
		return
	}
	e.log.Debug("aws request", "op", "DescribeCluster", "cluster", name)
	writeREST(w, http.StatusOK, map[string]any{"cluster": map[string]any{
		"name":                 c.name,
		"arn":                  fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", region, account, c.name),
		"status":               c.status,
		"endpoint":             c.endpoint,
		"certificateAuthority": map[string]any{"data": c.caData},
		"version":              c.version,
		"createdAt":            epoch(c.created),
	}})
}

// handlePutEKSCluster registers a cluster over HTTP, for an emulator run as
// its own process: {"name","endpoint","caData","status"} (status defaults
// to ACTIVE).
func (e *Emulator) handlePutEKSCluster(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name     string `json:"name"`
		Endpoint string `json:"endpoint"`
		CAData   string `json:"caData"`
		Status   string `json:"status"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if req.Name == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name is required"})
		return
	}
	req.Status = cmp.Or(req.Status, "ACTIVE")
	e.putEKSCluster(req.Name, req.Endpoint, req.CAData, req.Status)
	writeJSON(w, http.StatusOK, req)
}

// writeRESTError is a REST-JSON error: the type in x-amzn-ErrorType, the
// message in the body.
func writeRESTError(w http.ResponseWriter, ae *apiError) {
	status := ae.status
	if ae.typ == "ThrottlingException" {
		// REST-JSON services throttle with 429.
		status = http.StatusTooManyRequests
	}
	w.Header().Set("X-Amzn-ErrorType", ae.typ)
	writeREST(w, status, map[string]string{"message": ae.msg})
}

func writeREST(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-RequestId", newID()[:32])
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"message":"encoding response"}`)
		w.Header().Set("X-Amzn-ErrorType", "ServerException")
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
