// Package fencegatetest gives tests the fencegate binary to run.
//
// `make test` builds cmd/fencegate once, before any test package starts, and
// names it in FENCEGATE_TEST_BINARY; every test package that runs the binary
// (e2e, e2e/kube, deploy/observability, bench) uses that one. Without the
// variable (go test on one package) the first call in a test process builds
// it into a temporary directory.
//
// Every build uses BuildFlags, the release image's flags (CGO_ENABLED=0,
// -trimpath): deploy/image builds the image's binary with them too, so on a
// cold build cache the dependency tree is compiled once without -race per
// run, not once per flavour of flags and again in each package that raced to
// build it.
package fencegatetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Env names the prebuilt binary.
const Env = "FENCEGATE_TEST_BINARY"

// BuildFlags are the go build flags of every test build of a fencegate
// command, and BuildEnv its environment additions; the Makefile's
// test-binary target uses the same.
var (
	BuildFlags = []string{"-trimpath", "-buildvcs=false"}
	BuildEnv   = []string{"CGO_ENABLED=0"}
)

// Root is the repository's root directory.
func Root() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "..")
}

// Build runs go build with BuildFlags (and extra flags, such as -ldflags)
// on pkg, writing the binary to out.
func Build(out, pkg string, extra ...string) error {
	args := append([]string{"build"}, BuildFlags...)
	args = append(args, extra...)
	args = append(args, "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = Root()
	cmd.Env = append(os.Environ(), BuildEnv...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

var (
	mu       sync.Mutex
	builtDir string // the directory Binary built into, for Cleanup
)

var built = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "fencegate-test-bin")
	if err != nil {
		return "", err
	}
	mu.Lock()
	builtDir = dir
	mu.Unlock()
	bin := filepath.Join(dir, "fencegate")
	if err := Build(bin, "./cmd/fencegate"); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return bin, nil
})

// Binary returns the path of the fencegate binary: $FENCEGATE_TEST_BINARY
// when set (it must be an executable file), else one built once per
// process. A built binary's directory is left for Cleanup.
func Binary() (string, error) {
	if p := os.Getenv(Env); p != "" {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s: %v", Env, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable file", Env, p)
		}
		return p, nil
	}
	return built()
}

// Cleanup removes the binary Binary built, if it built one. Call it from
// TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if builtDir != "" {
		os.RemoveAll(builtDir)
		builtDir = ""
	}
}
