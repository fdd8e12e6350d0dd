// Package image builds fencegate's OCI image from a statically linked binary,
// with no Docker daemon and no base image: the binary (plus the CA bundle, so
// rediss:// and Firestore can verify their servers) is the only layer on an
// empty image, run by a fixed non-root user. cmd/fencegate-image writes it
// as an OCI image layout (`make image`); any OCI tool pushes it from there.
//
// The constants below are what the Dockerfile, deploy/k8s and the Helm chart
// must agree with; the tests of this package check all three.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image runs, and as whom.
const (
	// UID and GID run the process: the conventional "nonroot" identity
	// (65532), numeric so no /etc/passwd is needed and Kubernetes'
	// runAsNonRoot can verify it.
	UID = 65532
	GID = 65532
	// Binary is where the fencegate binary sits in the image.
	Binary = "/fencegate"
	// WorkDir is the working directory, writable by UID, so the default
	// store (bolt://./fencegate.db) works for `docker run` without a config.
	// Deployments mount their config and use a networked store instead.
	WorkDir = "/var/lib/fencegate"
	// CACerts is where the CA bundle goes: the first path Go's crypto/x509
	// reads on Linux.
	CACerts = "/etc/ssl/certs/ca-certificates.crt"
)

// Entrypoint is the binary alone and Cmd its default subcommand, so the same
// image runs `serve` by default and any other subcommand (`migrate`, `token`,
// `lock run`) when a Job passes its own args.
var (
	Entrypoint = []string{Binary}
	Cmd        = []string{"serve"}
)

// Ports are the listeners' ports, by the container port names deploy/k8s and
// the chart use: the HTTP lock API (forward-auth, health, metrics), the gRPC
// lock API, Envoy ext_authz, and the admission webhook.
var Ports = map[string]int{"http": 8080, "grpc": 9090, "authz": 9191, "webhook": 8443}

// Options say what goes into the image.
type Options struct {
	// Binary is the path of a statically linked Linux fencegate binary
	// (CGO_ENABLED=0): an empty image has no dynamic loader.
	Binary string
	// CACerts is the path of a PEM CA bundle to include; empty leaves it
	// out (then only stores without TLS can be reached).
	CACerts string
	// Version is the version the binary was stamped with (-X main.version).
	Version string
	// Revision is the source revision (a commit), optional.
	Revision string
	// Created is the image's creation time, also every file's modification
	// time; the zero value means the Unix epoch, for reproducible builds.
	Created time.Time
}

// Labels the image config carries (OCI annotation keys).
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelTitle    = "org.opencontainers.image.title"
	LabelSource   = "org.opencontainers.image.source"
)

// Source is the project's repository, for the source label.
const Source = "https://github.com/fencegate/fencegate"

// ErrNotStatic is returned for a binary that needs a dynamic loader.
var ErrNotStatic = errors.New("image: the binary is dynamically linked; build it with CGO_ENABLED=0")

// Build returns the image: one layer on an empty OCI image.
func Build(o Options) (v1.Image, error) {
	if o.Version == "" {
		return nil, errors.New("image: a version is required")
	}
	arch, err := checkBinary(o.Binary)
	if err != nil {
		return nil, err
	}
	created := o.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	layerTar, err := rootfs(o, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "fencegate-image " + o.Version, Comment: "static fencegate binary"},
	})
	if err != nil {
		return nil, fmt.Errorf("image: append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		User:         strconv.Itoa(UID) + ":" + strconv.Itoa(GID),
		Entrypoint:   Entrypoint,
		Cmd:          Cmd,
		WorkingDir:   WorkDir,
		Env:          []string{"PATH=/"},
		ExposedPorts: map[string]struct{}{},
		Labels: map[string]string{
			LabelVersion: o.Version,
			LabelTitle:   "fencegate",
			LabelSource:  Source,
		},
	}
	if o.Revision != "" {
		cf.Config.Labels[LabelRevision] = o.Revision
	}
	for _, p := range Ports {
		cf.Config.ExposedPorts[strconv.Itoa(p)+"/tcp"] = struct{}{}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: set config: %w", err)
	}
	return img, nil
}

// WriteLayout writes img as an OCI image layout in dir (created if missing,
// replacing an image there), tagged ref (org.opencontainers.image.ref.name),
// the form `crane push dir REF` and `skopeo copy oci:dir:ref` read.
func WriteLayout(dir string, img v1.Image, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image: clear %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: layout %s: %w", dir, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image: config: %w", err)
	}
	if err := p.WriteImage(img); err != nil {
		return fmt.Errorf("image: write %s: %w", dir, err)
	}
	// The descriptor is written by hand: the library's would carry an
	// artifactType, which marks an artifact, not a runnable image.
	mt, err := img.MediaType()
	if err != nil {
		return fmt.Errorf("image: media type: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("image: manifest: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("image: digest: %w", err)
	}
	if err := p.AppendDescriptor(v1.Descriptor{
		MediaType:   mt,
		Size:        int64(len(raw)),
		Digest:      digest,
		Annotations: map[string]string{"org.opencontainers.image.ref.name": ref},
		Platform:    &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
	}); err != nil {
		return fmt.Errorf("image: index %s: %w", dir, err)
	}
	return nil
}

// checkBinary refuses a binary the empty image cannot run and returns its
// architecture in OCI terms.
func checkBinary(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("image: %s is not a Linux binary: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%w (%s)", ErrNotStatic, path)
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("image: %s is for %s, not amd64 or arm64", path, f.Machine)
}

// rootfs returns the layer's tar: the binary (root-owned, not writable by
// the process), the CA bundle, /tmp and the working directory.
func rootfs(o Options, mtime time.Time) ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	dir := func(name string, mode int64, uid, gid int) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid}}
	}
	entries := []entry{
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: Binary[1:], Mode: 0o555}, data: bin},
		dir("etc", 0o755, 0, 0),
		// /tmp is world-writable and sticky as everywhere; Kubernetes
		// mounts an emptyDir over it under readOnlyRootFilesystem.
		dir("tmp", 0o1777, 0, 0),
		dir("var", 0o755, 0, 0),
		dir("var/lib", 0o755, 0, 0),
		dir(WorkDir[1:], 0o700, UID, GID),
	}
	if o.CACerts != "" {
		pem, err := os.ReadFile(o.CACerts)
		if err != nil {
			return nil, fmt.Errorf("image: CA bundle: %w", err)
		}
		entries = append(entries,
			dir("etc/ssl", 0o755, 0, 0),
			dir("etc/ssl/certs", 0o755, 0, 0),
			entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: CACerts[1:], Mode: 0o444}, data: pem})
	}
	// Parents before children, in a stable order: the same inputs give the
	// same digest.
	sort.Slice(entries, func(i, j int) bool { return entries[i].hdr.Name < entries[j].hdr.Name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.ModTime = mtime
		h.Size = int64(len(e.data))
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("image: tar %s: %w", h.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("image: tar %s: %w", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image: tar: %w", err)
	}
	return buf.Bytes(), nil
}
