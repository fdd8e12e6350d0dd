package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// TestLockRun runs `fencegate lock run` against a bolt gateway: the
// command's environment, its exit status, contention with and without
// --wait, a lock lost mid-run, and a missing command.
func TestLockRun(t *testing.T) {
	t.Parallel()
	g := StartGateway(t, "bolt://"+filepath.Join(t.TempDir(), "run.db"), "--authz-addr", "off", "--grpc-addr", "off")
	server := g.URL()

	t.Run("environment and exit status", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		out := filepath.Join(dir, "env")
		key := "run/" + randHex(6)
		res := runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", server, "--key", key, "--",
			"sh", "-c", `printf '%s\n%s\n%s\n' "$FENCE_KEY" "$FENCE_TOKEN" "$FENCE_LOCK_ID" > "$0"; exit 7`, out)
		if res.code != 7 {
			t.Fatalf("lock run -- exit 7: exit %d\n%s", res.code, res.stderr)
		}
		lines := strings.Split(strings.TrimSpace(readFile(t, out)), "\n")
		if len(lines) != 3 || lines[0] != key || !fenceRE.MatchString(lines[1]) || lockstore.ValidateLockID(lines[2]) != nil {
			t.Fatalf("command saw FENCE_KEY/FENCE_TOKEN/FENCE_LOCK_ID = %q", lines)
		}
		// Released when the command ended, whatever its status.
		wantLocked(t, server, key, false)
		wantExact(t, "lookup of the run's lockId", post(t, server, "/v1/locks/lookup", `{"lockId":%q}`, lines[2]), 404, `{}`)
		if strings.Contains(res.stderr, lines[2]) {
			t.Errorf("lock run printed the lockId on stderr")
		}

		// A command killed by a signal: 128+N, like a shell.
		res = runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", server, "--key", key, "--", "sh", "-c", `kill -KILL $$`)
		if res.code != 128+int(syscall.SIGKILL) {
			t.Errorf("command killed by SIGKILL: exit %d, want %d\n%s", res.code, 128+int(syscall.SIGKILL), res.stderr)
		}
	})

	t.Run("contention", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		key := "run/" + randHex(6)
		first := filepath.Join(dir, "first")
		firstDone := filepath.Join(dir, "first.done")
		second := filepath.Join(dir, "second")
		holder := startFencegate(t, nil, "lock", "run", "--server", server, "--key", key, "--",
			"sh", "-c", `echo "$FENCE_TOKEN" > "$0"; sleep 1.5; touch "$1"`, first, firstDone)
		waitFile(t, first, 10*time.Second)

		res := runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", server, "--key", key, "--wait", "0", "--", "true")
		if res.code != 120 {
			t.Errorf("lock run --wait 0 on a held key: exit %d, want 120\n%s", res.code, res.stderr)
		}
		if !strings.Contains(res.stderr, "held") {
			t.Errorf("busy message does not say the lock is held: %s", res.stderr)
		}

		// The waiter runs only after the holder's command finished.
		res = runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", server, "--key", key, "--wait", "5s", "--",
			"sh", "-c", `test -e "$1" || exit 9; echo "$FENCE_TOKEN" > "$0"`, second, firstDone)
		if res.code != 0 {
			t.Fatalf("lock run --wait 5s: exit %d, want 0 (9: it ran while the first held the lock)\n%s", res.code, res.stderr)
		}
		if hr := holder.wait(t, 30*time.Second); hr.code != 0 {
			t.Errorf("holder: exit %d\n%s", hr.code, hr.stderr)
		}
		f1, f2 := strings.TrimSpace(readFile(t, first)), strings.TrimSpace(readFile(t, second))
		if !fenceRE.MatchString(f1) || !fenceRE.MatchString(f2) || f2 <= f1 {
			t.Errorf("fences: first %q, second %q; want the second larger", f1, f2)
		}
	})

	t.Run("lock lost", func(t *testing.T) {
		t.Parallel()
		idFile := filepath.Join(t.TempDir(), "id")
		key := "run/" + randHex(6)
		start := time.Now()
		run := startFencegate(t, nil, "lock", "run", "--server", server, "--key", key, "--ttl", "2s", "--grace", "1s", "--",
			"sh", "-c", `echo "$FENCE_LOCK_ID" > "$0"; sleep 60`, idFile)
		waitFile(t, idFile, 10*time.Second)
		id := strings.TrimSpace(readFile(t, idFile))
		// Someone else (an operator, a buggy peer) releases it: the next
		// background extend gets ok=false.
		wantExact(t, "release behind the runner's back", post(t, server, "/v1/locks/release", `{"lockId":%q}`, id), 200, `{"ok":true}`)
		released := time.Now()
		res := run.wait(t, 30*time.Second)
		if res.code != 121 {
			t.Fatalf("lock run after losing the lock: exit %d, want 121\n%s", res.code, res.stderr)
		}
		// Extends run every ttl/2 = 1 s; SIGTERM stops sh and sleep at once.
		if d := time.Since(released); d > 5*time.Second {
			t.Errorf("lock run noticed the loss after %v", d)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("lock run took %v: the command was not stopped", d)
		}
		if !strings.Contains(res.stderr, "stopping the command") {
			t.Errorf("stderr does not explain the stop:\n%s", res.stderr)
		}
		t.Logf("lost lock noticed and command stopped %v after the release", time.Since(released))
	})

	t.Run("signal forwarded", func(t *testing.T) {
		t.Parallel()
		started := filepath.Join(t.TempDir(), "started")
		key := "run/" + randHex(6)
		run := startFencegate(t, nil, "lock", "run", "--server", server, "--key", key, "--",
			"sh", "-c", `echo up > "$0"; sleep 60`, started)
		waitFile(t, started, 10*time.Second)
		wantLocked(t, server, key, true)
		sent := time.Now()
		if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		res := run.wait(t, 30*time.Second)
		if res.code != 128+int(syscall.SIGTERM) {
			t.Errorf("lock run sent SIGTERM: exit %d, want %d (the command's death by SIGTERM)\n%s", res.code, 128+int(syscall.SIGTERM), res.stderr)
		}
		if d := time.Since(sent); d > 5*time.Second {
			t.Errorf("lock run took %v to stop after SIGTERM", d)
		}
		wantLocked(t, server, key, false)
	})

	t.Run("gateway gone", func(t *testing.T) {
		t.Parallel()
		// Its own gateway, stopped mid-run: extends fail, and before the
		// TTL runs out the command is stopped, since the lock may be gone.
		own := StartGateway(t, "bolt://"+filepath.Join(t.TempDir(), "gone.db"), "--authz-addr", "off", "--grpc-addr", "off")
		started := filepath.Join(t.TempDir(), "started")
		run := startFencegate(t, nil, "lock", "run", "--server", own.URL(), "--key", "run/gone", "--ttl", "2s", "--grace", "1s", "--",
			"sh", "-c", `echo up > "$0"; sleep 60`, started)
		waitFile(t, started, 10*time.Second)
		own.Stop(t)
		stopped := time.Now()
		res := run.wait(t, 30*time.Second)
		if res.code != 121 {
			t.Fatalf("lock run with its gateway gone: exit %d, want 121\n%s", res.code, res.stderr)
		}
		if d := time.Since(stopped); d > 5*time.Second {
			t.Errorf("lock run stopped the command %v after the gateway went away (ttl 2s)", d)
		}
	})

	t.Run("command not found", func(t *testing.T) {
		t.Parallel()
		key := "run/" + randHex(6)
		for _, argv := range [][]string{{"no-such-command-" + randHex(4)}, {"/nonexistent/" + randHex(4)}} {
			res := runFencegate(t, 30*time.Second, nil, append([]string{"lock", "run", "--server", server, "--key", key, "--"}, argv...)...)
			if res.code != 127 {
				t.Errorf("lock run -- %s: exit %d, want 127\n%s", argv[0], res.code, res.stderr)
			}
		}
		notExec := filepath.Join(t.TempDir(), "script")
		writeFile(t, notExec, "#!/bin/sh\nexit 0\n") // mode 0600: not executable
		if res := runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", server, "--key", key, "--", notExec); res.code != 126 {
			t.Errorf("lock run -- a non-executable file: exit %d, want 126\n%s", res.code, res.stderr)
		}
		// Nothing stays locked after a command that never ran.
		wantLocked(t, server, key, false)
	})

	t.Run("failures", func(t *testing.T) {
		t.Parallel()
		if res := runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", "http://127.0.0.1:1", "--key", "k", "--", "true"); res.code != 125 {
			t.Errorf("lock run with the gateway unreachable: exit %d, want 125\n%s", res.code, res.stderr)
		}
		if res := runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", server, "--", "true"); res.code != 125 {
			t.Errorf("lock run without --key: exit %d, want 125\n%s", res.code, res.stderr)
		}
		if res := runFencegate(t, 30*time.Second, nil, "lock", "run", "--server", server, "--key", "k"); res.code != 125 {
			t.Errorf("lock run without a command: exit %d, want 125\n%s", res.code, res.stderr)
		}
	})
}

// TestLockSubcommands: `fencegate lock acquire|status|lookup|extend|release`
// print JSON and exit 0 (yes), 1 (no), 2 (usage), 3 (failure).
func TestLockSubcommands(t *testing.T) {
	t.Parallel()
	g := StartGateway(t, "bolt://"+filepath.Join(t.TempDir(), "cli.db"), "--authz-addr", "off", "--grpc-addr", "off")
	server := g.URL()
	key := "cli/" + randHex(6)
	lock := func(env []string, args ...string) (map[string]any, runResult) {
		t.Helper()
		res := runFencegate(t, 30*time.Second, env, append([]string{"lock"}, append(args, "--server", server)...)...)
		var out map[string]any
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil && res.code < 2 {
			t.Errorf("lock %s: stdout %q is not JSON: %v", args[0], res.stdout, err)
		}
		return out, res
	}
	want := func(what string, res runResult, code int) {
		t.Helper()
		if res.code != code {
			t.Errorf("%s: exit %d, want %d\nstdout %s\nstderr %s", what, res.code, code, res.stdout, res.stderr)
		}
	}

	a, res := lock(nil, "acquire", "--key", key, "--ttl", "30s")
	want("acquire", res, 0)
	id, fence := str(a["lockId"]), str(a["fence"])
	if a["ok"] != true || lockstore.ValidateLockID(id) != nil || !fenceRE.MatchString(fence) || num(a["expiresAtMs"]) <= 0 {
		t.Fatalf("acquire printed %s", res.stdout)
	}

	out, res := lock(nil, "acquire", "--key", key)
	want("second acquire", res, 1)
	if out["ok"] != false || out["reason"] != "locked" {
		t.Errorf("second acquire printed %s", res.stdout)
	}

	out, res = lock(nil, "status", "--key", key)
	want("status", res, 0)
	if out["locked"] != true {
		t.Errorf("status printed %s", res.stdout)
	}

	out, res = lock(nil, "lookup", "--key", key)
	want("lookup", res, 0)
	if out["keyHash"] != lockstore.HashKey(key) || out["fence"] != fence || strings.Contains(res.stdout, id) {
		t.Errorf("lookup printed %s", res.stdout)
	}

	out, res = lock(nil, "extend", "--lock-id", id, "--ttl", "60s")
	want("extend", res, 0)
	if out["ok"] != true || num(out["expiresAtMs"]) <= num(a["expiresAtMs"]) {
		t.Errorf("extend printed %s", res.stdout)
	}

	// The lockId from the environment keeps it off the command line.
	out, res = lock([]string{"FENCE_LOCK_ID=" + id}, "release")
	want("release", res, 0)
	if out["ok"] != true {
		t.Errorf("release printed %s", res.stdout)
	}
	out, res = lock(nil, "release", "--lock-id", id)
	want("second release", res, 1)
	if out["ok"] != false {
		t.Errorf("second release printed %s", res.stdout)
	}
	_, res = lock(nil, "extend", "--lock-id", id)
	want("extend after release", res, 1)
	out, res = lock(nil, "lookup", "--lock-id", id)
	want("lookup after release", res, 1)
	if len(out) != 0 {
		t.Errorf("lookup after release printed %s, want {}", res.stdout)
	}
	out, res = lock(nil, "status", "--key", key)
	want("status after release", res, 0)
	if out["locked"] != false {
		t.Errorf("status after release printed %s", res.stdout)
	}

	// Usage errors and failures.
	_, res = lock(nil, "acquire")
	want("acquire without --key", res, 2)
	_, res = lock(nil, "release", "--lock-id", "bad")
	want("release of a malformed lockId", res, 2)
	_, res = lock(nil, "lookup", "--key", key, "--lock-id", id)
	want("lookup with both", res, 2)
	_, res = lock(nil, "steal", "--key", key)
	want("unknown subcommand", res, 2)
	res = runFencegate(t, 30*time.Second, nil, "lock", "status", "--key", key, "--server", "http://127.0.0.1:1")
	want("status with the gateway unreachable", res, 3)
}

// bgRun is a fencegate process running while the test does other things.
type bgRun struct {
	cmd            *exec.Cmd
	stdout, stderr testutil.LogBuffer
	done           chan struct{}
	err            error
}

// startFencegate starts the binary like runFencegate, without waiting. It
// is killed at cleanup if still running.
func startFencegate(t testing.TB, env []string, args ...string) *bgRun {
	t.Helper()
	b := &bgRun{done: make(chan struct{})}
	b.cmd = exec.Command(binary, args...)
	b.cmd.Dir = t.TempDir()
	b.cmd.Env = append(append(os.Environ(), "FENCEGATE_CONFIG=", "FENCEGATE_TOKEN=", "FENCE_LOCK_ID="), env...)
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start fencegate: %v", err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

// wait waits for the process to exit, failing the test after timeout.
func (b *bgRun) wait(t testing.TB, timeout time.Duration) runResult {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(timeout):
		t.Fatalf("fencegate %s still running after %v\n%s", strings.Join(b.cmd.Args[1:], " "), timeout, b.stderr.String())
	}
	res := runResult{stdout: b.stdout.String(), stderr: b.stderr.String()}
	var ee *exec.ExitError
	if errors.As(b.err, &ee) {
		res.code = ee.ExitCode()
	} else if b.err != nil {
		t.Fatalf("fencegate: %v", b.err)
	}
	return res
}

// waitFile waits until path exists and is not empty.
func waitFile(t testing.TB, path string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
