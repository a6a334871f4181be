// Package fakeplugintest holds plugin binaries used only by tests and
// benchmarks. noop has every capability, scripted by the job's context. bare
// has Execute only. legacy is a plugin built before Validate existed, with
// only Info, served without pkg/plugin's server. Build them with
// internal/bintest as tether-plugin-<name>.
package fakeplugintest
