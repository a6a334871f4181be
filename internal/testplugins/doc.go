// Package testplugins holds plugin binaries used only by tests and
// benchmarks: noop (every capability, scripted by the job's context) and bare
// (Execute only). Build them with internal/testbin as tether-plugin-<name>.
package testplugins
