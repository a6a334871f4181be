// Package api holds the JSON shapes tether's HTTP API exchanges: the
// requests it takes, the answers it gives, the records of its followed
// streams, and the job statuses and error classes they carry. The server
// encodes these types and pkg/client decodes them, so the wire format is
// defined here once.
//
// It depends on the standard library only, so any module may import it.
package api
