package api

import (
	_ "embed"
	"fmt"
	"net/http"

	"sigs.k8s.io/yaml"
)

// openAPIYAML is the OpenAPI 3 description of the API. It is written in YAML
// (comments, less noise) and served as JSON, the form tools expect.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPI returns the OpenAPI 3 description of the API as JSON, as
// GET /api/v1/openapi.json serves it.
func OpenAPI() ([]byte, error) {
	doc, err := yaml.YAMLToJSON(openAPIYAML)
	if err != nil {
		return nil, fmt.Errorf("converting the embedded OpenAPI description to JSON: %w", err)
	}
	return doc, nil
}

// openAPIHandler serves the description, converted once. It sits behind the
// same auth as the rest of /api/: it holds nothing secret, but one rule for
// /api/ is easier to reason about than exceptions, and the file is in the
// repository for anyone without a token.
func (s *server) openAPIHandler() http.HandlerFunc {
	doc, err := OpenAPI()
	return func(w http.ResponseWriter, r *http.Request) {
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(doc) // the client went away; nothing to do
	}
}
