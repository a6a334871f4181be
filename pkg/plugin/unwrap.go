package plugin

// Wrapper is implemented by a decorator around another plugin (logging,
// metrics, tracing). The SDK finds each optional interface (Resumer,
// Cleaner, HealthChecker, Validator, KillGracer, Describer, Shutdowner)
// on the decorator first and then on what Unwrap returns, in turn, so a
// decorator keeps the capabilities of the plugin it wraps without
// forwarding every method. A method the decorator does implement wins.
type Wrapper interface {
	Unwrap() Plugin
}

// As finds an implementation of T on p or, through Wrapper, on the plugins
// p wraps, as errors.As finds an error. The SDK calls each optional method
// on what As finds.
func As[T any](p Plugin) (T, bool) {
	for p != nil {
		if t, ok := p.(T); ok {
			return t, true
		}
		w, ok := p.(Wrapper)
		if !ok {
			break
		}
		p = w.Unwrap()
	}
	var zero T
	return zero, false
}
