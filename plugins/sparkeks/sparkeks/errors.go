package sparkeks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// transient reports whether err is worth repeating the same request for.
// The API server was overloaded, timed out or failed, or the connection
// broke (refused, reset, EOF, a network timeout, the per-call timeout). A
// request the server refused on its merits is not, and neither is a TLS
// verification failure (a wrong CA or endpoint does not fix itself). err
// is a failure: every caller has checked it is not nil.
func transient(err error) bool {
	if apiRefused(err) {
		return false // retried within auth_grace, not as a transient error
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return isAny(err, retriedStatuses) || status.Status().Code >= 500 // any other 5xx, e.g. a proxy's 502
	}
	// Not an answer from the API server: the connection's trouble, unless
	// the server's certificate was not accepted.
	return !tlsVerificationFailed(err)
}

// retriedStatuses are the API server's answers worth repeating a request
// for, besides any other 5xx.
var retriedStatuses = []func(error) bool{
	apierrors.IsServerTimeout, apierrors.IsTimeout, apierrors.IsTooManyRequests,
	apierrors.IsInternalError, apierrors.IsServiceUnavailable, apierrors.IsUnexpectedServerError,
}

// isAny reports whether one of preds holds for err.
func isAny(err error, preds []func(error) bool) bool {
	return slices.ContainsFunc(preds, func(is func(error) bool) bool { return is(err) })
}

// tlsVerificationFailed reports whether the API server's certificate was
// not accepted.
func tlsVerificationFailed(err error) bool {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &certInvalid) || errors.As(err, &verify)
}

// apiRefused reports whether the API server refused the request's
// credentials (401) or their permissions (403). Both can pass. An EKS token
// is renewed, an access entry or RBAC binding propagates.
func apiRefused(err error) bool {
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return true
	}
	// By code too. A proxy may answer 401/403 with another reason.
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		c := status.Status().Code
		return c == http.StatusUnauthorized || c == http.StatusForbidden
	}
	return false
}

// refusedError is a request refused (401/403) for all of auth_grace.
type refusedError struct {
	err   error
	grace time.Duration
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("%v (refused for auth_grace %s)", e.err, e.grace)
}

func (e *refusedError) Unwrap() error { return e.err }

// backoff is a capped exponential delay.
type backoff struct {
	base, max, cur time.Duration
}

func newBackoff(base time.Duration) backoff {
	base = min(max(base, time.Millisecond), 500*time.Millisecond)
	return backoff{base: base, max: 30 * time.Second}
}

// next is base at first (cur 0), then twice the last, up to max.
func (b *backoff) next() time.Duration {
	b.cur = min(max(b.cur*2, b.base), b.max)
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
