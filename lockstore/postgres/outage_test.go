package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// pgBinDir holds the PostgreSQL 15 server binaries the outage test runs.
const pgBinDir = "/usr/lib/postgresql/15/bin"

// ownServer is a PostgreSQL server this test starts, stops and restarts on
// one port, so it can take the database away under a store.
type ownServer struct {
	t    *testing.T
	data string
	port int
	cred *syscall.Credential // non-nil when we are root: run as "postgres"
	log  *os.File
	cmd  *exec.Cmd
}

func startOwnServer(t *testing.T) *ownServer {
	t.Helper()
	testutil.NeedService(t, "a PostgreSQL server of its own (initdb, postgres, pg_ctl)")
	for _, b := range []string{"initdb", "postgres", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(pgBinDir, b)); err != nil {
			t.Fatalf("the outage test needs the PostgreSQL 15 server binaries in %s (apt-get install postgresql-15): %v", pgBinDir, err)
		}
	}
	dir := t.TempDir()
	srv := &ownServer{t: t, data: filepath.Join(dir, "data")}
	if err := os.Mkdir(srv.data, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and there is no 'postgres' user to run the test server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		srv.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The server user must reach its data directory through t.TempDir's
		// private (0700) parents.
		for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(srv.data, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv.log = log
	t.Cleanup(func() { log.Close() })
	if out, err := srv.command("initdb", "-A", "trust", "-U", "postgres", "-D", srv.data, "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	srv.port = testutil.FreePort(t)
	srv.start()
	t.Cleanup(srv.stop)
	return srv
}

func (s *ownServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(pgBinDir, name), args...)
	cmd.Dir = os.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

func (s *ownServer) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// start runs the server on s.port and waits until it accepts connections.
func (s *ownServer) start() {
	s.t.Helper()
	s.cmd = s.command("postgres", "-D", s.data, "-p", strconv.Itoa(s.port), "-k", s.data,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start postgres: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.dsn())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			logText, _ := os.ReadFile(s.log.Name())
			s.t.Fatalf("postgres on port %d did not come up: %v\n%s", s.port, err, logText)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeze stops (SIGSTOP) or resumes (SIGCONT) the postmaster and all its
// children: a server whose kernel still accepts TCP but which never answers,
// the outage only a deadline can bound. Signalled one by one because every
// backend calls setsid(), so there is no process group to signal.
func (s *ownServer) freeze(on bool) {
	s.t.Helper()
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	pids := append([]int{s.cmd.Process.Pid}, childPids(s.t, s.cmd.Process.Pid)...)
	for _, pid := range pids {
		// ESRCH: a backend whose client went away exited meanwhile.
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			s.t.Fatalf("signal %v to server process %d: %v", sig, pid, err)
		}
	}
}

// childPids lists the direct children of pid from /proc.
func childPids(t *testing.T, pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("freeze needs /proc: %v", err)
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// Fields after the parenthesised command name: state, ppid, ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// stop kills the server the way a crash would (immediate shutdown: no
// checkpoint, clients cut off) and reaps it.
func (s *ownServer) stop() {
	if s.cmd == nil {
		return
	}
	s.freeze(false) // a frozen server cannot act on pg_ctl's signal
	if out, err := s.command("pg_ctl", "stop", "-D", s.data, "-m", "immediate", "-w").CombinedOutput(); err != nil {
		s.t.Logf("pg_ctl stop: %v\n%s; killing pid %d", err, out, s.cmd.Process.Pid)
		_ = s.cmd.Process.Kill()
	}
	_ = s.cmd.Process.Kill() // no-op once it exited; certain death otherwise
	_ = s.cmd.Wait()
	s.cmd = nil
}

// TestOutage takes PostgreSQL away under a store: every operation must fail
// within its deadline with ServiceUnavailable or NetworkTimeout (never hang,
// never claim success), and after a restart on the same port the store
// recovers by itself, the lock taken before the crash is still held, and
// fences continue from where they were.
func TestOutage(t *testing.T) {
	srv := startOwnServer(t)
	s, err := Open(tctx(t), Config{DSN: srv.dsn(), MaxConns: 2})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()

	held, err := s.Acquire(tctx(t), "held", 5*time.Minute)
	if err != nil || !held.OK {
		t.Fatalf("Acquire(held) = %+v, %v", held, err)
	}
	f1, err := s.Acquire(tctx(t), "f", time.Minute)
	if err != nil || !f1.OK {
		t.Fatalf("Acquire(f) = %+v, %v", f1, err)
	}
	if r, err := s.Release(tctx(t), f1.LockID); err != nil || !r.OK {
		t.Fatalf("Release(f) = %+v, %v", r, err)
	}

	// opsOn lists every operation against one key and the lock holding it.
	// Each phase gets its own: an operation that timed out against the
	// frozen server still runs once the server thaws (the request was in
	// its socket buffer; a timeout means "outcome unknown"), so the frozen
	// phase must not touch the locks the later checks count on.
	type op struct {
		name string
		do   func(context.Context) (bool, error) // bool: the op claimed success
	}
	opsOn := func(key, lockID string) []op {
		return []op{
			{"Acquire", func(c context.Context) (bool, error) { r, err := s.Acquire(c, key, time.Minute); return r.OK, err }},
			{"Release", func(c context.Context) (bool, error) { r, err := s.Release(c, lockID); return r.OK, err }},
			{"Extend", func(c context.Context) (bool, error) { r, err := s.Extend(c, lockID, time.Minute); return r.OK, err }},
			{"IsLocked", func(c context.Context) (bool, error) { _, err := s.IsLocked(c, key); return false, err }},
			{"LookupKey", func(c context.Context) (bool, error) { _, err := s.LookupKey(c, key); return false, err }},
			{"Inspect", func(c context.Context) (bool, error) { _, err := s.Inspect(c, key); return false, err }},
			{"CountHeld", func(c context.Context) (bool, error) { _, err := s.CountHeld(c); return false, err }},
			{"AppendAudit", func(c context.Context) (bool, error) {
				return false, s.AppendAudit(c, []lockstore.AuditEvent{{KeyHash: "h", Reason: "stale"}})
			}},
			{"Ping", func(c context.Context) (bool, error) { return false, s.Ping(c) }},
		}
	}
	allFail := func(phase string, ops []op, deadline time.Duration, codes ...lockstore.Code) {
		t.Helper()
		for _, o := range ops {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			start := time.Now()
			ok, err := o.do(ctx)
			elapsed := time.Since(start)
			cancel()
			code := lockstore.CodeOf(err)
			t.Logf("%s, %s: %s after %s", phase, o.name, code, elapsed.Round(time.Millisecond))
			if ok {
				t.Errorf("%s, %s claimed success", phase, o.name)
			}
			if !slices.Contains(codes, code) {
				t.Errorf("%s, %s = %v (%s), want one of %v", phase, o.name, err, code, codes)
			}
			if elapsed > deadline+500*time.Millisecond {
				t.Errorf("%s, %s took %s, past its %s deadline", phase, o.name, elapsed, deadline)
			}
		}
	}

	// A server that hangs: only the caller's deadline ends the wait.
	fz, err := s.Acquire(tctx(t), "frozen", time.Minute)
	if err != nil || !fz.OK {
		t.Fatalf("Acquire(frozen) = %+v, %v", fz, err)
	}
	srv.freeze(true)
	allFail("frozen server", opsOn("frozen", fz.LockID), time.Second, lockstore.NetworkTimeout)
	srv.freeze(false)

	// A server that is gone: connections reset, dials refused.
	srv.stop()
	const opDeadline = 3 * time.Second
	allFail("server down", opsOn("f", held.LockID), opDeadline, lockstore.ServiceUnavailable, lockstore.NetworkTimeout)

	srv.start()

	// The pool may hand out a connection from before the crash once more;
	// the store must recover within a few attempts, not stay broken.
	var f2 lockstore.AcquireResult
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
		f2, err = s.Acquire(ctx, "f", time.Minute)
		cancel()
		if err == nil {
			t.Logf("recovered on attempt %d", attempt)
			break
		}
		if c := lockstore.CodeOf(err); c != lockstore.ServiceUnavailable && c != lockstore.NetworkTimeout {
			t.Fatalf("Acquire after restart = %v (%s), want a transient code while recovering", err, c)
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !f2.OK || f2.Fence <= f1.Fence {
		t.Fatalf("Acquire(f) after restart = %+v; want OK with a fence above %s", f2, f1.Fence)
	}
	if r, err := s.Acquire(tctx(t), "held", time.Minute); err != nil || r.OK {
		t.Fatalf("Acquire(held) after restart = %+v, %v; want contention (the lock survived)", r, err)
	}
	if r, err := s.Release(tctx(t), held.LockID); err != nil || !r.OK {
		t.Fatalf("Release(held) after restart = %+v, %v", r, err)
	}
}
