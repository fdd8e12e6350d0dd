// Command fencegate-image writes fencegate's OCI image as an OCI image layout,
// from a statically linked binary, with no Docker daemon and no base image
// (see package deploy/image). `make image` runs it:
//
//	fencegate-image --binary bin/fencegate-linux --version v0.1.0 --out bin/image
//
// Push the layout with any OCI tool, for example
//
//	crane push bin/image ghcr.io/you/fencegate:v0.1.0
//	skopeo copy oci:bin/image:v0.1.0 docker://ghcr.io/you/fencegate:v0.1.0
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/deploy/image"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "fencegate-image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("fencegate-image", flag.ContinueOnError)
	binary := fs.String("binary", "", "statically linked Linux fencegate binary (CGO_ENABLED=0)")
	out := fs.String("out", "", "directory to write the OCI image layout to (replaced)")
	version := fs.String("version", "", "version the binary is stamped with; also the layout's tag")
	revision := fs.String("revision", "", "source revision for the org.opencontainers.image.revision label")
	caCerts := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle to include, or \"\" for none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *out == "" || *version == "" {
		return fmt.Errorf("--binary, --out and --version are required")
	}
	// SOURCE_DATE_EPOCH (reproducible-builds.org) fixes the timestamps;
	// without it they are the Unix epoch, so the digest depends only on the
	// inputs either way.
	var created time.Time
	if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		created = time.Unix(sec, 0)
	}
	img, err := image.Build(image.Options{Binary: *binary, CACerts: *caCerts, Version: *version, Revision: *revision, Created: created})
	if err != nil {
		return err
	}
	if err := image.WriteLayout(*out, img, *version); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (tag %s, %s)\n", *out, *version, digest)
	return nil
}
