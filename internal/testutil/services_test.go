package testutil_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestServiceTiers: a test that needs a service it cannot find FAILS with
// the install hint in a full run (make test) and is SKIPPED with the reason
// only under -short (make test-unit). Each case runs this test binary as a
// child, with the variable unset. The broken variant (a helper that skips
// whenever the service is missing, as `make test` must never) is what the
// "full run fails" cases catch.
func TestServiceTiers(t *testing.T) {
	if os.Getenv("TESTUTIL_SERVICE_CHILD") != "" {
		t.Skip("running as the child")
	}
	for _, tc := range []struct {
		name  string
		child string
		short bool
		want  []string // in the child's output
	}{
		{"redis, full run: fails with the hint", "TestServiceChildRedis", false, []string{"--- FAIL", "REDIS_URL is not set", "scripts/testenv"}},
		{"redis, -short: skips saying why", "TestServiceChildRedis", true, []string{"--- SKIP", "needs Redis (REDIS_URL)", "make test-unit"}},
		{"postgres, full run: fails", "TestServiceChildPostgres", false, []string{"--- FAIL", "DATABASE_URL is not set"}},
		{"postgres, -short: skips", "TestServiceChildPostgres", true, []string{"--- SKIP", "needs PostgreSQL (DATABASE_URL)"}},
		{"tool, full run: fails", "TestServiceChildTool", false, []string{"--- FAIL", "fencegate-no-such-tool is not on PATH", "apt-get install it"}},
		{"tool, -short: skips", "TestServiceChildTool", true, []string{"--- SKIP", "needs fencegate-no-such-tool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-test.run=^" + tc.child + "$", "-test.v"}
			if tc.short {
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(withoutEnv("REDIS_URL", "DATABASE_URL"), "TESTUTIL_SERVICE_CHILD=1")
			out, _ := cmd.CombinedOutput()
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Fatalf("child output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func withoutEnv(names ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

func TestServiceChildRedis(t *testing.T) {
	if os.Getenv("TESTUTIL_SERVICE_CHILD") == "" {
		t.Skip("run by TestServiceTiers")
	}
	testutil.RedisURL(t)
}

func TestServiceChildPostgres(t *testing.T) {
	if os.Getenv("TESTUTIL_SERVICE_CHILD") == "" {
		t.Skip("run by TestServiceTiers")
	}
	testutil.DatabaseURL(t)
}

func TestServiceChildTool(t *testing.T) {
	if os.Getenv("TESTUTIL_SERVICE_CHILD") == "" {
		t.Skip("run by TestServiceTiers")
	}
	testutil.LookPath(t, "fencegate-no-such-tool", "apt-get install it")
}
