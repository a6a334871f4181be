// Package gobuild says how tether's binaries are compiled: the image's
// (internal/image) and the ones tests build and run (agents, plugins). One
// configuration for both lets them share the go build cache, so the image
// test links what the other tests compiled instead of compiling the whole
// tree again (a cgo and a non-cgo build of the same package are different
// cache entries, and so are builds with and without -trimpath).
package gobuild

import (
	"context"
	"os"
	"os/exec"
	"slices"
)

// Flags are the go build flags of every tether binary (besides a version
// stamp in -ldflags, which only the link sees).
func Flags() []string { return []string{"-trimpath"} }

// Env is the go command's environment for a tether binary: env (the
// process's when nil) with cgo off, so the binaries are static.
func Env(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	return append(slices.Clone(env), "CGO_ENABLED=0")
}

// Command is `go build` of pkg into out with Flags and Env, run by goBin.
func Command(ctx context.Context, goBin, out, pkg string) *exec.Cmd {
	args := append([]string{"build"}, Flags()...)
	cmd := exec.CommandContext(ctx, goBin, append(args, "-o", out, pkg)...)
	cmd.Env = Env(nil)
	return cmd
}
