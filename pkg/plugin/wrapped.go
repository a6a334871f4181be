package plugin

import (
	"fmt"
	"reflect"
	"strings"
)

// optional are the interfaces the SDK finds on a plugin by type assertion,
// with the method each adds.
var optional = []struct {
	name, method string
	has          func(Plugin) bool
}{
	{"Resumer", "Resume", func(p Plugin) bool { _, ok := As[Resumer](p); return ok }},
	{"Cleaner", "Cleanup", func(p Plugin) bool { _, ok := As[Cleaner](p); return ok }},
	{"HealthChecker", "HealthCheck", func(p Plugin) bool { _, ok := As[HealthChecker](p); return ok }},
	{"Validator", "Validate", func(p Plugin) bool { _, ok := As[Validator](p); return ok }},
	{"KillGracer", "MaxKillGrace", func(p Plugin) bool { _, ok := As[KillGracer](p); return ok }},
	{"Describer", "Describe", func(p Plugin) bool { _, ok := As[Describer](p); return ok }},
	{"Shutdowner", "Shutdown", func(p Plugin) bool { _, ok := As[Shutdowner](p); return ok }},
}

// CheckWrapped refuses a decorator that hides what it wraps: a struct that
// embeds a Plugin (the interface) whose value implements an optional
// interface (Resumer, Cleaner, …) the struct does not. Embedding the
// interface promotes only Info and Execute, so the agent would never call
// Resume or Cleanup, and the plugin's jobs would fail where they could be
// resumed. Serve and plugintest call it. Give the decorator an Unwrap
// method (Wrapper), forward the methods on it, or embed the concrete type.
func CheckWrapped(impl Plugin) error {
	v := reflect.ValueOf(impl)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	pluginType := reflect.TypeFor[Plugin]()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.Anonymous || f.Type != pluginType {
			continue
		}
		// A nil inner Plugin implements nothing, so nothing is lost.
		inner, _ := v.Field(i).Interface().(Plugin)
		var lost []string
		for _, o := range optional {
			if o.has(inner) && !o.has(impl) {
				lost = append(lost, o.method)
			}
		}
		if len(lost) > 0 {
			return fmt.Errorf("plugin %T embeds plugin.Plugin holding %T, which implements %s; %T does not, so the agent would never call them: give %T an Unwrap() plugin.Plugin method (plugin.Wrapper), forward them on it, or embed %T itself",
				impl, inner, strings.Join(lost, ", "), impl, impl, inner)
		}
	}
	return nil
}
