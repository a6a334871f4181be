// Command mkimage builds tether's OCI image without a container engine
// (internal/image) and prints its digest. `make image` runs it.
//
//	go run ./cmd/mkimage -o .tether/image -version v1.2.3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tetherjobs/tether/internal/image"
)

func main() {
	var o image.Options
	flag.StringVar(&o.Output, "o", ".tether/image", "the OCI image layout directory to write (replaced)")
	flag.StringVar(&o.Version, "version", "dev", "the version stamped into the agent and the image's labels")
	flag.StringVar(&o.Arch, "arch", "", "GOARCH of the image (default: this machine's)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "the PEM bundle of CA certificates to include")
	flag.StringVar(&o.ModuleDir, "C", ".", "the repository root")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	digest, err := image.Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	fmt.Printf("%s tether:%s %s\n", o.Output, o.Version, digest)
}
