package redis

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// These tests run against redis-server processes they start themselves, on
// free loopback ports, because they kill, freeze, restart, flush or
// reconfigure the server — nothing to do to a shared one.

// redisServer is one redis-server process the test owns.
type redisServer struct {
	t    *testing.T
	bin  string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
	tls  *tls.Config // set when the server listens with TLS only
}

// startServer starts redis-server with args (plus port, bind, dir and no
// RDB snapshots unless args set them) and waits until it answers. It is
// killed when the test ends.
func startServer(t *testing.T, args ...string) *redisServer {
	t.Helper()
	bin := testutil.LookPath(t, "redis-server", "these tests start their own servers (install redis-server, e.g. apt-get install redis-server)")
	r := &redisServer{t: t, bin: bin, port: testutil.FreePort(t), dir: t.TempDir(), args: args}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start (re)starts the server on its port with its data directory.
func (r *redisServer) start() {
	r.t.Helper()
	args := []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir, "--save", ""}
	args = append(args, r.args...)
	logf, err := os.OpenFile(filepath.Join(r.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	r.log = logf
	r.cmd = exec.Command(r.bin, args...)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan error, 1)
	r.done = done
	cmd := r.cmd
	go func() { done <- cmd.Wait() }()
	r.waitReady()
}

// waitReady polls with a raw PING until the server answers (an auth error
// counts: it is up).
func (r *redisServer) waitReady() {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-r.done:
			r.t.Fatalf("redis-server exited: %v\n%s", err, r.logText())
		default:
		}
		var c net.Conn
		var err error
		if r.tls != nil {
			c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", r.addr(), r.tls)
		} else {
			c, err = net.DialTimeout("tcp", r.addr(), time.Second)
		}
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("redis-server on %s did not become ready\n%s", r.addr(), r.logText())
}

// kill stops the server with SIGKILL (a crash, not a shutdown) and waits.
func (r *redisServer) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // in case a test froze it
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
	r.log.Close()
}

func (r *redisServer) signal(sig os.Signal) {
	r.t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("signal %v: %v", sig, err)
	}
}

func (r *redisServer) logText() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "server.log"))
	return string(b)
}

// openURL opens a store from a store URL, failing the test on error.
func openURL(t *testing.T, url string) *Store {
	t.Helper()
	s, err := openURLErr(t, url)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	return s
}

func openURLErr(t *testing.T, url string) (*Store, error) {
	t.Helper()
	cfg, err := ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
}

// ops are every store call, for the outage tests.
func ops(s *Store, lockID string) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"acquire": func(ctx context.Context) error { _, err := s.Acquire(ctx, "other", time.Second); return err },
		"release": func(ctx context.Context) error { _, err := s.Release(ctx, lockID); return err },
		"extend":  func(ctx context.Context) error { _, err := s.Extend(ctx, lockID, time.Second); return err },
		"isLocked": func(ctx context.Context) error {
			_, err := s.IsLocked(ctx, "k")
			return err
		},
		"lookupKey":    func(ctx context.Context) error { _, err := s.LookupKey(ctx, "k"); return err },
		"lookupLockID": func(ctx context.Context) error { _, err := s.LookupLockID(ctx, lockID); return err },
		"inspect":      func(ctx context.Context) error { _, err := s.Inspect(ctx, "k"); return err },
		"ping":         s.Ping,
		"appendAudit": func(ctx context.Context) error {
			return s.AppendAudit(ctx, []lockstore.AuditEvent{{TimeMs: 1, KeyHash: "x", Reason: "stale"}})
		},
		"queryAudit": func(ctx context.Context) error { _, err := s.QueryAudit(ctx, lockstore.AuditQuery{}); return err },
	}
}

// TestOutageKilled: with the server gone every operation fails promptly with
// ServiceUnavailable (or NetworkTimeout), well inside the caller's deadline;
// once a server is back on the port the same store recovers by itself.
func TestOutageKilled(t *testing.T) {
	srv := startServer(t)
	s := openURL(t, "redis://"+srv.addr()+"/0?prefix=outage")
	r := locktest.Acquire(t, s, "k", time.Minute)

	srv.kill()
	for name, op := range ops(s, r.LockID) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		err := op(ctx)
		elapsed := time.Since(start)
		cancel()
		code := lockstore.CodeOf(err)
		if code != lockstore.ServiceUnavailable && code != lockstore.NetworkTimeout {
			t.Errorf("%s with the server down: %v (code %q), want ServiceUnavailable or NetworkTimeout", name, err, code)
		}
		if elapsed > 1500*time.Millisecond {
			t.Errorf("%s with the server down took %v; the 1s deadline must bound it", name, elapsed)
		}
	}

	srv.start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover after the server came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The restarted server had no persistence: its data, counters included,
	// is gone. The clock floor still issues a fence above the one handed out
	// before the restart (without it, fences would start again at 1).
	r2 := locktest.Acquire(t, s, "k", time.Minute)
	if r2.Fence <= r.Fence {
		t.Errorf("fence on the restarted, empty server = %s, not above %s from before the restart", r2.Fence, r.Fence)
	}
	if res, err := s.Release(context.Background(), r2.LockID); err != nil || !res.OK {
		t.Errorf("Release after recovery = %+v, %v", res, err)
	}
}

// TestOutageFrozen: a server that accepts nothing and answers nothing
// (SIGSTOP) costs a caller no more than its deadline, and without a deadline
// no more than the read timeout.
func TestOutageFrozen(t *testing.T) {
	srv := startServer(t)
	// s's socket timeouts are far above the probes' deadline, so a probe
	// that returns near its deadline proves the context is honoured; s1
	// shows the read timeout bounding a call without a deadline.
	s := openURL(t, "redis://"+srv.addr()+"/0?prefix=frozen&read_timeout=10s&write_timeout=10s")
	s1 := openURL(t, "redis://"+srv.addr()+"/0?prefix=frozen&read_timeout=1s&write_timeout=1s")
	r := locktest.Acquire(t, s, "k", time.Minute)
	if _, err := s1.IsLocked(context.Background(), "k"); err != nil { // s1 has a pooled connection now
		t.Fatal(err)
	}

	// The kernel still buffers what the client writes to a frozen server,
	// and the server runs it after SIGCONT even though the caller already
	// got NetworkTimeout. So the probes use a lockId nobody holds: a
	// timed-out Release of r would really release it once thawed.
	stranger, err := lockstore.NewLockID()
	if err != nil {
		t.Fatal(err)
	}
	srv.signal(syscall.SIGSTOP)
	for name, op := range ops(s, stranger) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		err := op(ctx)
		elapsed := time.Since(start)
		cancel()
		if code := lockstore.CodeOf(err); code != lockstore.NetworkTimeout {
			t.Errorf("%s against a frozen server: %v (code %q), want NetworkTimeout", name, err, code)
		}
		// Generous for a loaded CI machine, and still far below the 10s
		// socket timeouts.
		if elapsed > 2*time.Second {
			t.Errorf("%s against a frozen server took %v past a 300ms deadline", name, elapsed)
		}
	}
	start := time.Now()
	_, err = s1.IsLocked(context.Background(), "k")
	if code := lockstore.CodeOf(err); code != lockstore.NetworkTimeout {
		t.Errorf("IsLocked without a deadline against a frozen server: %v, want NetworkTimeout", err)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("IsLocked without a deadline took %v; read_timeout=1s must bound it", elapsed)
	}

	srv.signal(syscall.SIGCONT)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		locked, err := s.IsLocked(ctx, "k")
		cancel()
		if err == nil {
			if !locked {
				t.Error("the lock taken before the freeze is gone")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover after SIGCONT: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if res, err := s.Release(context.Background(), r.LockID); err != nil || !res.OK {
		t.Errorf("Release after the thaw = %+v, %v", res, err)
	}
}

// TestPersistence: with AOF (fsync always) a fence counter survives DEBUG
// RELOAD and a crash (SIGKILL) and restart: fences keep increasing.
func TestPersistence(t *testing.T) {
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes")
	s := openURL(t, "redis://"+srv.addr()+"/0?prefix=durable")
	ctx := context.Background()
	var last lockstore.AcquireResult
	for range 3 {
		last = locktest.Acquire(t, s, "k", time.Minute)
		if res, err := s.Release(ctx, last.LockID); err != nil || !res.OK {
			t.Fatalf("Release = %+v, %v", res, err)
		}
	}
	held := locktest.Acquire(t, s, "held", time.Minute)

	if err := s.Client().Do(ctx, "DEBUG", "RELOAD").Err(); err != nil {
		t.Fatalf("DEBUG RELOAD: %v", err)
	}
	afterReload := locktest.Acquire(t, s, "k", time.Second)
	if afterReload.Fence <= last.Fence {
		t.Fatalf("fence after DEBUG RELOAD = %s, not above %s", afterReload.Fence, last.Fence)
	}

	srv.kill()
	srv.start()
	s2 := openURL(t, "redis://"+srv.addr()+"/0?prefix=durable")
	ks, err := s2.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if ks.LatestFence != afterReload.Fence {
		t.Errorf("LatestFence after crash+restart = %q, want %q", ks.LatestFence, afterReload.Fence)
	}
	// Wait out the short lock so the key is free, then take it again.
	time.Sleep(time.Until(time.UnixMilli(afterReload.ExpiresAtMs + lockstore.TimeToleranceMs + 100)))
	after := locktest.Acquire(t, s2, "k", time.Second)
	if after.Fence <= afterReload.Fence {
		t.Errorf("fence after crash+restart = %s, not above %s", after.Fence, afterReload.Fence)
	}
	if res, err := s2.Release(ctx, held.LockID); err != nil || !res.OK {
		t.Errorf("Release of a lock taken before the crash = %+v, %v (lock and index persist too)", res, err)
	}
}

// TestNoScript: after SCRIPT FLUSH every operation still works (EVALSHA
// falls back to EVAL, which re-caches the script).
func TestNoScript(t *testing.T) {
	srv := startServer(t)
	s := openURL(t, "redis://"+srv.addr()+"/0?prefix=noscript")
	ctx := context.Background()
	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ex, _ := s.Client().ScriptExists(ctx, acquireScript.Hash()).Result(); len(ex) != 1 || ex[0] {
		t.Fatalf("SCRIPT EXISTS after flush = %v", ex)
	}
	r := locktest.Acquire(t, s, "k", time.Minute)
	if e, err := s.Extend(ctx, r.LockID, time.Minute); err != nil || !e.OK {
		t.Fatalf("Extend after flush = %+v, %v", e, err)
	}
	if li, err := s.LookupLockID(ctx, r.LockID); err != nil || li == nil {
		t.Fatalf("LookupLockID after flush = %+v, %v", li, err)
	}
	if ks, err := s.Inspect(ctx, "k"); err != nil || ks.Live == nil {
		t.Fatalf("Inspect after flush = %+v, %v", ks, err)
	}
	if res, err := s.Release(ctx, r.LockID); err != nil || !res.OK {
		t.Fatalf("Release after flush = %+v, %v", res, err)
	}
	if err := s.AppendAudit(ctx, []lockstore.AuditEvent{{TimeMs: 1, KeyHash: "h", Reason: "stale"}}); err != nil {
		t.Fatalf("AppendAudit after flush: %v", err)
	}
	if ex, _ := s.Client().ScriptExists(ctx, acquireScript.Hash()).Result(); len(ex) != 1 || !ex[0] {
		t.Errorf("acquire script not re-cached after the EVAL fallback")
	}
}

// TestAuthErrors: refused credentials and missing permissions are
// AuthFailed; a server refusing more clients is RateLimited (or, when the
// reset wins the race, ServiceUnavailable).
func TestAuthErrors(t *testing.T) {
	srv := startServer(t, "--requirepass", "right")
	for _, c := range []struct{ name, url string }{
		{"no password", "redis://" + srv.addr() + "/0"},
		{"wrong password", "redis://:wrong@" + srv.addr() + "/0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openURLErr(t, c.url)
			if code := lockstore.CodeOf(err); code != lockstore.AuthFailed {
				t.Fatalf("Open: %v (code %q), want AuthFailed", err, code)
			}
			if strings.Contains(err.Error(), "right") {
				t.Error("error text contains the password")
			}
		})
	}
	s := openURL(t, "redis://:right@"+srv.addr()+"/0?prefix=auth")
	locktest.Acquire(t, s, "k", time.Second)

	// A user that may connect but not run scripts.
	if err := s.Client().Do(context.Background(), "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+ping", "+hello", "+auth", "+client").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := openURLErr(t, "redis://limited:pw@"+srv.addr()+"/0")
	if code := lockstore.CodeOf(err); code != lockstore.AuthFailed {
		t.Errorf("Open as a user without script permission: %v (code %q), want AuthFailed", err, code)
	}

	full := startServer(t, "--maxclients", "1")
	hold, err := net.Dial("tcp", full.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	fmt.Fprint(hold, "PING\r\n")
	if line, _ := bufio.NewReader(hold).ReadString('\n'); !strings.HasPrefix(line, "+PONG") {
		t.Fatalf("holding connection got %q", line)
	}
	// Redis answers "ERR max number of clients reached" and closes at once;
	// whether the client reads that reply or first hits the reset is a race.
	_, err = openURLErr(t, "redis://"+full.addr()+"/0")
	if code := lockstore.CodeOf(err); code != lockstore.RateLimited && code != lockstore.ServiceUnavailable {
		t.Errorf("Open against a full server: %v (code %q), want RateLimited or ServiceUnavailable", err, code)
	}
}

// TestSentinel: one master and one sentinel; the store finds the master
// through a redis+sentinel URL.
func TestSentinel(t *testing.T) {
	master := startServer(t)
	port := testutil.FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor fgmaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds fgmaster 2000\n", port, dir, master.port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := &redisServer{t: t, bin: master.bin, port: port, dir: dir}
	sentinel.args = []string{conf, "--sentinel"}
	sentinel.startSentinel()
	t.Cleanup(sentinel.kill)

	s := openURL(t, fmt.Sprintf("redis+sentinel://127.0.0.1:%d/0?master=fgmaster&prefix=sent", port))
	r := locktest.Acquire(t, s, "k", time.Minute)
	if got, err := s.Client().ConfigGet(context.Background(), "port").Result(); err != nil || got["port"] != strconv.Itoa(master.port) {
		t.Errorf("connected to the server on port %v (%v), want the master's %d", got, err, master.port)
	}
	if res, err := s.Release(context.Background(), r.LockID); err != nil || !res.OK {
		t.Fatalf("Release through Sentinel = %+v, %v", res, err)
	}

	_, err := openURLErr(t, fmt.Sprintf("redis+sentinel://127.0.0.1:%d/0?master=nosuchmaster", port))
	if code := lockstore.CodeOf(err); code != lockstore.ServiceUnavailable {
		t.Errorf("Open of an unknown master: %v (code %q), want ServiceUnavailable", err, code)
	}
}

// startSentinel runs redis-server in sentinel mode: the config file must
// come first, so the usual flags are not prepended.
func (r *redisServer) startSentinel() {
	r.t.Helper()
	logf, err := os.OpenFile(filepath.Join(r.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	r.log = logf
	r.cmd = exec.Command(r.bin, r.args...)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start sentinel: %v", err)
	}
	done := make(chan error, 1)
	r.done = done
	cmd := r.cmd
	go func() { done <- cmd.Wait() }()
	r.waitReady()
}

// TestTLS: rediss:// reaches a TLS-only server whose CA the config trusts;
// an untrusted certificate is AuthFailed, plain text to a TLS port is
// ServiceUnavailable.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	pool := writeTestCerts(t, dir)
	bin := testutil.LookPath(t, "redis-server", "install redis-server, e.g. apt-get install redis-server")
	port := testutil.FreePort(t)
	srv := &redisServer{t: t, bin: bin, port: port, dir: dir,
		tls: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	srv.args = []string{"--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.pem"), "--tls-key-file", filepath.Join(dir, "server-key.pem"),
		"--tls-auth-clients", "no"}
	srv.start()
	t.Cleanup(srv.kill)

	url := "rediss://127.0.0.1:" + strconv.Itoa(port) + "/0?prefix=tls"
	cfg, err := ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Options.TLSConfig.RootCAs = pool
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	defer s.Close()
	r := locktest.Acquire(t, s, "k", time.Second)
	if res, err := s.Release(ctx, r.LockID); err != nil || !res.OK {
		t.Fatalf("Release over TLS = %+v, %v", res, err)
	}

	if _, err := openURLErr(t, url); lockstore.CodeOf(err) != lockstore.AuthFailed {
		t.Errorf("Open with an untrusted server certificate: %v, want AuthFailed", err)
	}
	if _, err := openURLErr(t, "redis://127.0.0.1:"+strconv.Itoa(port)+"/0"); lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Errorf("Open in plain text against a TLS port: %v, want ServiceUnavailable", err)
	}
}

// writeTestCerts writes a throwaway CA and a server certificate for
// 127.0.0.1 into dir and returns a pool trusting the CA.
func writeTestCerts(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fencegate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("server.pem", "CERTIFICATE", der)
	write("server-key.pem", "EC PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}

// TestEvictionPolicy: a Redis that may evict keys without a TTL would evict
// fence counters and fences would repeat, so Open refuses allkeys-*;
// volatile-* (which only evicts keys with a TTL, i.e. locks) opens.
func TestEvictionPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		ok     bool
	}{
		{"noeviction", true},
		{"volatile-lru", true},
		{"allkeys-lru", false},
		{"allkeys-random", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := startServer(t, "--maxmemory", "64mb", "--maxmemory-policy", tc.policy)
			cfg, err := ParseURL("redis://" + srv.addr() + "/0?prefix=evict")
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(context.Background(), cfg)
			if s != nil {
				defer s.Close()
			}
			if tc.ok && err != nil {
				t.Fatalf("Open with %s: %v", tc.policy, err)
			}
			if !tc.ok && (lockstore.CodeOf(err) != lockstore.InvalidArgument || !strings.Contains(err.Error(), "noeviction")) {
				t.Fatalf("Open with %s: %v, want InvalidArgument naming noeviction", tc.policy, err)
			}
		})
	}
}
