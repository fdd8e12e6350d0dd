package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestStartupFailures: every way `fencegate serve` can be misconfigured
// ends in a non-zero exit with a message that says what is wrong, before
// anything listens, and never prints a password.
func TestStartupFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "bolt://" + filepath.Join(dir, "s.db")
	manyProblems := filepath.Join(dir, "bad.yaml")
	writeFile(t, manyProblems, `store: mysql://root:hunter2@db/locks
http:
  addr: "no-port-here"
log:
  level: chatty
tokens:
  - name: ""
    sha256: "plaintext-token"
    operations: [acquire, fly]
`)
	// Found while wiring, before the (unreachable) store is opened: exit 2, not 3.
	badAdmission := filepath.Join(dir, "admission.yaml")
	certDir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(certDir, "tls.crt"), "not read before the resources are checked")
	writeFile(t, filepath.Join(certDir, "tls.key"), "not read before the resources are checked")
	writeFile(t, badAdmission, "store: redis://127.0.0.1:1/0\nadmission:\n  addr: 127.0.0.1:0\n  tls: {certFile: "+
		filepath.Join(certDir, "tls.crt")+", keyFile: "+filepath.Join(certDir, "tls.key")+"}\n  resources: [\"a/b/c/d\"]\n")
	badAdmissionEnums := filepath.Join(dir, "admission-enums.yaml")
	writeFile(t, badAdmissionEnums, "store: redis://127.0.0.1:1/0\nadmission:\n  addr: 127.0.0.1:0\n  tls: {certFile: "+
		filepath.Join(certDir, "tls.crt")+", keyFile: "+filepath.Join(certDir, "tls.key")+"}\n  policy: sometimes\n  mode: loud\n")
	unknownField := filepath.Join(dir, "typo.yaml")
	writeFile(t, unknownField, "store: "+db+"\nhttp:\n  adress: 127.0.0.1:0\n")

	busy := testutil.Listen(t)
	t.Cleanup(func() { busy.Close() })

	cases := []struct {
		name    string
		args    []string
		code    int      // 0: any non-zero
		want    []string // in stderr
		notWant []string // not anywhere in the output
	}{
		{name: "unknown flag", args: []string{"serve", "--no-such-flag"}, code: 2,
			want: []string{"flag provided but not defined", "-no-such-flag"}},
		{name: "bad bool", args: []string{"serve", "--insecure=maybe", "--store", db}, code: 2, want: []string{"insecure"}},
		{name: "stray argument", args: []string{"serve", "--store", db, "extra"}, code: 2, want: []string{`unexpected argument "extra"`}},
		{name: "unknown command", args: []string{"serf"}, code: 2, want: []string{`unknown command "serf"`, "serve"}},
		{name: "no command", args: nil, code: 2, want: []string{"usage: fencegate"}},
		{name: "unsupported store scheme", args: []string{"serve", "--store", "mysql://user:secret@127.0.0.1/x"}, code: 2,
			want: []string{"invalid configuration", "store", "mysql://user:xxxxx@127.0.0.1/x"}, notWant: []string{"secret"}},
		// A store URL that does not parse is a configuration problem: exit 2
		// before anything starts, listed with the others, never exit 3 after
		// a failed connection.
		{name: "store URL that does not parse", args: []string{"serve", "--store", "redis://user:secret@127.0.0.1:1?nosuch=1", "--log-level", "chatty"}, code: 2,
			want:    []string{"invalid configuration", "store:", "nosuch", "log.level", "chatty"},
			notWant: []string{"secret", "fencegate ready", "level=ERROR"}},
		{name: "postgres URL that does not parse", args: []string{"serve", "--store", "postgres://user:secret@127.0.0.1:1/db?autoMigrate=perhaps"}, code: 2,
			want: []string{"invalid configuration", "store:", "autoMigrate"}, notWant: []string{"secret", "fencegate ready"}},
		{name: "admission policy and mode parsed before start", args: []string{"serve", "--config", badAdmissionEnums}, code: 2,
			want: []string{"invalid configuration", "admission: policy", "sometimes", "admission: mode", "loud"}, notWant: []string{"127.0.0.1:1"}},
		{name: "unreachable redis", args: []string{"serve", "--store", "redis://user:secret@127.0.0.1:1/0", "--log-format", "json"},
			code: 3, want: []string{"store", "127.0.0.1:1"}, notWant: []string{"secret", "fencegate ready"}},
		{name: "unreachable postgres", args: []string{"serve", "--store", "postgres://user:secret@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"},
			code: 3, want: []string{"store", "127.0.0.1:1"}, notWant: []string{"secret", "fencegate ready"}},
		{name: "config with several problems", args: []string{"serve", "--config", manyProblems}, code: 2,
			want: []string{"invalid configuration", "store:", "mysql", "http.addr", "no-port-here", "log.level", "chatty",
				"token 0: name is empty", "tokens[0].sha256", `unknown operation "fly"`},
			notWant: []string{"hunter2", "plaintext-token"}},
		{name: "admission resource that does not parse", args: []string{"serve", "--config", badAdmission}, code: 2,
			want: []string{"invalid configuration", "admission: resources", "a/b/c/d"}, notWant: []string{"127.0.0.1:1"}},
		{name: "config with a misspelt field", args: []string{"serve", "--config", unknownField}, code: 2,
			want: []string{"adress"}},
		{name: "missing config file", args: []string{"serve", "--config", filepath.Join(dir, "absent.yaml")}, code: 2,
			want: []string{"absent.yaml"}},
		{name: "port in use", args: []string{"serve", "--store", db, "--http-addr", busy.Addr().String(), "--grpc-addr", "127.0.0.1:0", "--authz-addr", "off"},
			code: 3, want: []string{"http listener", "address already in use"}, notWant: []string{"fencegate ready"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := runFencegate(t, 30*time.Second, nil, c.args...)
			if c.code == 0 && res.code == 0 || c.code != 0 && res.code != c.code {
				t.Errorf("exit %d, want %v\nstderr:\n%s", res.code, codeWant(c.code), res.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(res.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, res.stderr)
				}
			}
			for _, nw := range c.notWant {
				if strings.Contains(res.stdout+res.stderr, nw) {
					t.Errorf("output contains %q:\n%s%s", nw, res.stdout, res.stderr)
				}
			}
			if res.dur > 20*time.Second {
				t.Errorf("took %v to fail", res.dur)
			}
		})
	}
}

func codeWant(c int) string {
	if c == 0 {
		return "non-zero"
	}
	return strconv.Itoa(c)
}

// TestVersion: `fencegate version` prints the version on stdout.
func TestVersion(t *testing.T) {
	t.Parallel()
	res := runFencegate(t, 10*time.Second, nil, "version")
	if res.code != 0 || !regexp.MustCompile(`^fencegate \S+\n$`).MatchString(res.stdout) {
		t.Errorf("version: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

// TestSIGTERM: a serving gateway drains and exits 0 on SIGTERM, saying so.
func TestSIGTERM(t *testing.T) {
	t.Parallel()
	g := StartGateway(t, "bolt://"+filepath.Join(t.TempDir(), "term.db"))
	if r := Do(t, g.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"term"}`}); r.Status != 200 {
		t.Fatalf("acquire = %d %s", r.Status, r.Body)
	}
	start := time.Now()
	g.Stop(t)
	if g.err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", g.err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v with nothing in flight", d)
	}
	if !strings.Contains(g.Logs(), "shutting down") {
		t.Errorf("no shutdown line in the log:\n%s", g.Logs())
	}
	// The store was closed cleanly: a new gateway on the same file opens it
	// and still knows the fence.
	g2 := StartGateway(t, g.storeURL(t))
	if r := Do(t, g2.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"term"}`}); r.Status != 409 {
		t.Errorf("acquire on the reopened store = %d %s, want 409 (the lock outlives the process)", r.Status, r.Body)
	}
}

// storeURL recovers the --store argument a gateway was started with.
func (g *Gateway) storeURL(t testing.TB) string {
	t.Helper()
	for i, a := range g.cmd.Args {
		if a == "--store" && i+1 < len(g.cmd.Args) {
			return g.cmd.Args[i+1]
		}
	}
	t.Fatal("gateway has no --store argument")
	return ""
}

// runResult is how one fencegate invocation ended.
type runResult struct {
	stdout, stderr string
	code           int
	dur            time.Duration
}

// runFencegate runs the binary with args in a temporary directory (so the
// default bolt://./fencegate.db stays there), no config from the
// environment, and env added. It fails the test if the process outlives
// timeout.
func runFencegate(t testing.TB, timeout time.Duration, env []string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(append(os.Environ(), "FENCEGATE_CONFIG=", "FENCEGATE_TOKEN=", "FENCE_LOCK_ID="), env...)
	var stdout, stderr testutil.LogBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := runResult{stdout: stdout.String(), stderr: stderr.String(), dur: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("fencegate %s: still running after %v\n%s", strings.Join(args, " "), timeout, res.stderr)
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("fencegate %s: %v", strings.Join(args, " "), err)
	}
	return res
}
