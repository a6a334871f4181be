package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/ui"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// TestConsoleServedBesideTheAPI checks that the console's files need no
// token (they carry no data) while its data, /api/v1, still does. With
// Console nil the paths are the API's JSON 404. The host check covers the
// console too.
func TestConsoleServedBesideTheAPI(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		o.Tokens = []config.Token{{Name: "ci", Token: "s3cret"}}
		o.Console = ui.Handler()
	})
	r := e.do(t, "GET", "/", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/html"), r.header.Get("Content-Type"))
	assert.NotEmpty(t, r.header.Get("Content-Security-Policy"))
	assert.Equal(t, http.StatusUnauthorized, e.do(t, "GET", "/api/v1/jobs", "").status, "the data stays behind the token")
	assert.Equal(t, http.StatusNotFound, e.do(t, "GET", "/ui/no-such-file.js", "").status)
	assert.Equal(t, http.StatusNotFound, e.do(t, "GET", "/jobs", "").status, "only / itself is the page")
	assert.Equal(t, http.StatusMethodNotAllowed, e.do(t, "POST", "/", "").status)

	// Auth off. A rebound name gets no console either (with tokens, any
	// Host is answered: a rebinding page has no token to read data with).
	open := newEnv(t, func(o *api.Options) { o.Console = ui.Handler() })
	assert.Equal(t, http.StatusOK, open.do(t, "GET", "/", "").status)
	r = open.send(t, hostile{method: "GET", path: "/", header: map[string]string{"Host": "evil.example"}})
	assert.Equal(t, http.StatusMisdirectedRequest, r.status, "body: %s", r.body)

	off := newEnv(t, nil)
	for _, path := range []string{"/", "/ui/app.js"} {
		r := off.do(t, "GET", path, "")
		require.Equal(t, http.StatusNotFound, r.status, path)
		assert.Equal(t, wire.CodeNotFound, r.errBody(t).Code, path)
	}
}
