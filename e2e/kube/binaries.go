// Package kube runs fencegate's admission webhook behind a real
// kube-apiserver (with a real etcd), built from the Go module proxy by
// build.sh: no kind, no minikube, no container runtime.
package kube

import (
	"fmt"
	"os"
	"path/filepath"
)

// Versions build.sh builds; keep them in step with it (a test checks).
const (
	KubeVersion = "v1.35.4"
	EtcdVersion = "v3.6.5"
)

// CacheDir is where build.sh puts the binaries:
// ${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/kube.
func CacheDir() (string, error) {
	if d := os.Getenv("FENCEGATE_CACHE"); d != "" {
		return filepath.Join(d, "kube"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("kube: locate the binary cache: %w", err)
	}
	return filepath.Join(home, ".cache", "fencegate", "kube"), nil
}

// Binaries returns the paths of kube-apiserver and etcd, or an error naming
// build.sh when either is missing.
func Binaries() (apiserver, etcd string, err error) {
	dir, err := CacheDir()
	if err != nil {
		return "", "", err
	}
	apiserver = filepath.Join(dir, "kube-apiserver-"+KubeVersion, "kube-apiserver")
	etcd = filepath.Join(dir, "etcd-"+EtcdVersion, "etcd")
	for _, p := range []string{apiserver, etcd} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("kube: %s is missing: run `bash e2e/kube/build.sh` (or `make kube-bins`) first; it builds kube-apiserver %s and etcd %s into %s", p, KubeVersion, EtcdVersion, dir)
		}
	}
	return apiserver, etcd, nil
}
