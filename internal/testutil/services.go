package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// The two test tiers (CONTRIBUTING.md "Two tiers"): `make test` runs every
// test against real services, and a missing one FAILS the test with how to
// get it; `make test-unit` runs `go test -short` with no services, and
// there a test that needs one is skipped, saying which. The choice is made
// here, once, so no test decides it on its own: a test that needs a
// service calls one of these before anything else.

// shortHint ends every skip: the reader of a -short run learns where the
// skipped test does run.
const shortHint = "skipped under -short (make test-unit); make test runs it against the real service"

// NeedService marks tb as needing what (a server, a tool, a built binary):
// under -short it skips tb with the reason; otherwise it returns and the
// caller goes on to find what and fails when it is missing.
func NeedService(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("needs %s: %s", what, shortHint)
	}
}

// Env returns the environment variable name, which locates service. Under
// -short the test is skipped; otherwise an unset variable fails the test
// with hint (how to get one), never skips it.
func Env(tb testing.TB, name, service, hint string) string {
	tb.Helper()
	NeedService(tb, fmt.Sprintf("%s (%s)", service, name))
	v := os.Getenv(name)
	if v == "" {
		tb.Fatalf("%s is not set: %s", name, hint)
	}
	return v
}

// RedisURL returns REDIS_URL: the test's Redis (see Env).
func RedisURL(tb testing.TB) string {
	tb.Helper()
	return Env(tb, "REDIS_URL", "Redis",
		"run the tests with `make test` or scripts/testenv (they start a throwaway Redis), or export REDIS_URL=redis://127.0.0.1:PORT/0")
}

// DatabaseURL returns DATABASE_URL: the test's PostgreSQL (see Env).
func DatabaseURL(tb testing.TB) string {
	tb.Helper()
	return Env(tb, "DATABASE_URL", "PostgreSQL",
		"run the tests with `make test` or scripts/testenv (they start a throwaway PostgreSQL), or export DATABASE_URL=postgres://…")
}

// LookPath returns the path of the executable name (a tool or server the
// test runs, such as nginx or spin). Under -short the test is skipped;
// otherwise a missing one fails the test with install, how to install it.
func LookPath(tb testing.TB, name, install string) string {
	tb.Helper()
	NeedService(tb, name)
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("%s is not on PATH (%v): %s", name, err, install)
	}
	return p
}
