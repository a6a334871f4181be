package plugin

import (
	"errors"
	"fmt"

	"github.com/tetherjobs/tether/pkg/api"
)

// ErrorClass tells the host what a failure means for retries. It is the
// class the job's error_class stores and the API shows.
type ErrorClass = api.ErrorClass

// The classes a plugin's error carries.
const (
	// Retriable failures may be retried automatically (the job's max_retry).
	Retriable = api.Retriable
	// Permanent failures are never retried automatically.
	Permanent = api.Permanent
	// OutcomeUnknown means the work may or may not have happened. It is never
	// retried automatically, since a retry could run it twice.
	OutcomeUnknown = api.OutcomeUnknown
)

// Error is a classified failure. It crosses the plugin boundary with its class
// and message intact.
type Error struct {
	Class   ErrorClass
	Message string
	// Broken is set by the host, never by a plugin. The plugin process
	// crashed or the call to it broke, so the plugin never answered. The
	// remote work it was watching may well go on. A resumable job is
	// resumed in the same attempt rather than failed.
	Broken bool
}

// IsBroken reports whether err says the plugin process crashed or the call
// to it broke (see Error.Broken).
func IsBroken(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Broken
}

func (e *Error) Error() string { return e.Message }

// Errorf returns a classified error.
func Errorf(class ErrorClass, format string, args ...any) error {
	return &Error{Class: class, Message: fmt.Sprintf(format, args...)}
}

// WithClass classifies err, keeping its message. A nil err stays nil.
func WithClass(class ErrorClass, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: class, Message: err.Error()}
}

// ClassOf returns err's class. An error that carries no class is Permanent.
// Retrying work nobody said was safe to retry could run it twice.
func ClassOf(err error) ErrorClass {
	var e *Error
	if errors.As(err, &e) && e.Class.Valid() {
		return e.Class
	}
	return Permanent
}
