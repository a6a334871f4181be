// Package fakeplugintest holds plugin binaries used only by tests and
// benchmarks: noop (every capability, scripted by the job's context) and bare
// (Execute only), and legacy (a plugin built before Validate existed: only
// Info, served without pkg/plugin's server). Build them with internal/bintest as tether-plugin-<name>.
package fakeplugintest
