package certwatch_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/certwatch"
	"github.com/fencegate/fencegate/internal/certwatch/certtest"
	"github.com/fencegate/fencegate/internal/testutil"
)

const pollEvery = 10 * time.Millisecond

// server is a real TLS listener on loopback whose config comes from w.
// Each accepted connection completes its handshake and is closed.
func server(t *testing.T, w *certwatch.Watcher) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", w.ServerConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_ = c.(*tls.Conn).Handshake()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// served dials addr trusting roots and returns the certificate the server
// presented, or the handshake error.
func served(addr string, roots *x509.CertPool, client *tls.Certificate) (*x509.Certificate, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// With TLS 1.3 a rejected client certificate surfaces on the first read.
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var one [1]byte
	if _, err := c.Read(one[:]); err != nil && !isTimeout(err) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// run starts w.Run with an owner that stops it at the end of the test.
func run(t *testing.T, w *certwatch.Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
}

func TestRotationIsServedOverTLS(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	dir := t.TempDir()
	first := ca.Server(t, "first", "127.0.0.1")
	certFile, keyFile := first.Write(t, dir)

	var logs testutil.LogBuffer
	w, err := certwatch.New(certFile, keyFile, certwatch.Options{Logger: testutil.Logger(&logs, slog.LevelDebug), Interval: pollEvery})
	if err != nil {
		t.Fatal(err)
	}
	if !w.Ready() {
		t.Fatal("Ready() = false after a successful New")
	}
	run(t, w)
	addr := server(t, w)

	got, err := served(addr, ca.Pool(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("served %s, want the first certificate", got.Subject.CommonName)
	}

	second := ca.Server(t, "second", "127.0.0.1")
	second.Write(t, dir)
	testutil.WaitFor(t, 5*time.Second, "the rotated certificate to be served", func() bool {
		got, err := served(addr, ca.Pool(), nil)
		return err == nil && got.SerialNumber.Cmp(second.Cert.SerialNumber) == 0
	})
	if !strings.Contains(logs.String(), "certificate loaded") {
		t.Errorf("no reload logged:\n%s", logs.String())
	}
}

// Kubernetes projects a Secret as dir/tls.crt -> ..data/tls.crt with
// ..data -> ..<timestamp>/, and rotates by swapping the ..data symlink.
func TestRotationThroughSecretVolumeSymlinkSwap(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	dir := t.TempDir()
	project := func(name string, p certtest.Pair) {
		ts := filepath.Join(dir, name)
		if err := os.Mkdir(ts, 0o700); err != nil {
			t.Fatal(err)
		}
		p.Write(t, ts)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	first := ca.Server(t, "first", "127.0.0.1")
	project("..2026_01_01", first)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := certwatch.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"),
		certwatch.Options{Logger: testutil.Logger(io.Discard, slog.LevelDebug), Interval: pollEvery})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	addr := server(t, w)

	second := ca.Server(t, "second", "127.0.0.1")
	project("..2026_01_02", second)
	testutil.WaitFor(t, 5*time.Second, "the swapped certificate to be served", func() bool {
		got, err := served(addr, ca.Pool(), nil)
		return err == nil && got.SerialNumber.Cmp(second.Cert.SerialNumber) == 0
	})
}

func TestInvalidReplacementKeepsLastGoodPair(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	dir := t.TempDir()
	good := ca.Server(t, "good", "127.0.0.1")
	certFile, keyFile := good.Write(t, dir)
	var logs testutil.LogBuffer
	w, err := certwatch.New(certFile, keyFile, certwatch.Options{Logger: testutil.Logger(&logs, slog.LevelDebug), Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	addr := server(t, w)

	other := ca.Server(t, "other", "127.0.0.1")
	cases := []struct {
		name      string
		cert, key []byte
		wantErr   string
	}{
		{"key of another certificate", good.CertPEM, other.KeyPEM, "load key pair"},
		{"garbage certificate", []byte("not pem"), good.KeyPEM, "load key pair"},
		{"half-written key", good.CertPEM, good.KeyPEM[:len(good.KeyPEM)/2], "load key pair"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			certtest.WriteFile(t, certFile, tc.cert)
			certtest.WriteFile(t, keyFile, tc.key)
			changed, err := w.Reload()
			if changed || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Reload() = %v, %v; want false and an error containing %q", changed, err, tc.wantErr)
			}
			// Polling the same broken contents again reports the same error.
			if _, again := w.Reload(); again == nil {
				t.Fatal("second Reload of the same broken files returned nil")
			}
			if !w.Ready() {
				t.Fatal("Ready() = false; the last good pair should still count")
			}
			got, err := served(addr, ca.Pool(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.SerialNumber.Cmp(good.Cert.SerialNumber) != 0 {
				t.Fatalf("served %s, want the last good certificate", got.Subject.CommonName)
			}
		})
	}
	if !strings.Contains(logs.String(), "keeping the previous certificate") {
		t.Errorf("invalid pair not logged:\n%s", logs.String())
	}

	// Deleting the key entirely is also survivable, and restoring works.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Reload(); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Reload with the key missing = %v, want a not-exist error", err)
	}
	good.Write(t, dir)
	if changed, err := w.Reload(); !changed || err != nil {
		t.Fatalf("Reload after restoring = %v, %v; want true, nil", changed, err)
	}
}

func TestWaitForFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")

	if _, err := certwatch.New(certFile, keyFile, certwatch.Options{}); err == nil {
		t.Fatal("New with missing files and no WaitForFiles succeeded")
	}
	if _, err := certwatch.New("", keyFile, certwatch.Options{}); err == nil {
		t.Fatal("New with no certificate path succeeded")
	}

	w, err := certwatch.New(certFile, keyFile, certwatch.Options{
		Logger: testutil.Logger(io.Discard, slog.LevelDebug), Interval: pollEvery, WaitForFiles: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.Ready() {
		t.Fatal("Ready() = true with no files")
	}
	if _, err := w.GetCertificate(nil); !errors.Is(err, certwatch.ErrNotReady) {
		t.Fatalf("GetCertificate = %v, want ErrNotReady", err)
	}
	if _, err := w.GetClientCertificate(nil); !errors.Is(err, certwatch.ErrNotReady) {
		t.Fatalf("GetClientCertificate = %v, want ErrNotReady", err)
	}
	run(t, w)
	addr := server(t, w)
	ca := certtest.NewCA(t, "test CA")
	if _, err := served(addr, ca.Pool(), nil); err == nil {
		t.Fatal("handshake succeeded with no certificate loaded")
	}

	issued := ca.Server(t, "late", "127.0.0.1")
	issued.Write(t, dir)
	testutil.WaitFor(t, 5*time.Second, "Ready after the files appear", w.Ready)
	got, err := served(addr, ca.Pool(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.SerialNumber.Cmp(issued.Cert.SerialNumber) != 0 {
		t.Fatal("served an unexpected certificate")
	}
}

func TestClientCAsRotate(t *testing.T) {
	serverCA := certtest.NewCA(t, "server CA")
	dir := t.TempDir()
	certFile, keyFile := serverCA.Server(t, "server", "127.0.0.1").Write(t, dir)
	caFile := filepath.Join(dir, "client-ca.crt")
	oldCA, newCA := certtest.NewCA(t, "old client CA"), certtest.NewCA(t, "new client CA")
	certtest.WriteFile(t, caFile, oldCA.PEM)

	w, err := certwatch.New(certFile, keyFile, certwatch.Options{
		Logger: testutil.Logger(io.Discard, slog.LevelDebug), Interval: pollEvery, ClientCAFile: caFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	addr := server(t, w)

	clientOf := func(ca *certtest.CA) *tls.Certificate {
		p := ca.Server(t, "client", "client.test")
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	oldClient, newClient := clientOf(oldCA), clientOf(newCA)

	if _, err := served(addr, serverCA.Pool(), oldClient); err != nil {
		t.Fatalf("client of the configured CA refused: %v", err)
	}
	if _, err := served(addr, serverCA.Pool(), nil); err == nil {
		t.Fatal("client without a certificate accepted")
	}
	if _, err := served(addr, serverCA.Pool(), newClient); err == nil {
		t.Fatal("client of an unconfigured CA accepted")
	}

	certtest.WriteFile(t, caFile, newCA.PEM)
	testutil.WaitFor(t, 5*time.Second, "the new client CA to be enforced", func() bool {
		_, errNew := served(addr, serverCA.Pool(), newClient)
		_, errOld := served(addr, serverCA.Pool(), oldClient)
		return errNew == nil && errOld != nil
	})

	// A CA file without certificates is refused and the pool stays.
	certtest.WriteFile(t, caFile, []byte("nothing here"))
	if _, err := w.Reload(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("Reload with an empty CA file = %v", err)
	}
	if _, err := served(addr, serverCA.Pool(), newClient); err != nil {
		t.Fatalf("pool lost after a bad CA file: %v", err)
	}
}

func TestCloseStopsRun(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "s", "127.0.0.1").Write(t, t.TempDir())
	w, err := certwatch.New(certFile, keyFile, certwatch.Options{Interval: pollEvery})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	time.Sleep(3 * pollEvery)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after Close returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !w.Ready() {
		t.Fatal("Close dropped the certificate")
	}
}

func TestServerConfigKeepsBaseSettings(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "s", "127.0.0.1").Write(t, t.TempDir())
	w, err := certwatch.New(certFile, keyFile, certwatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}}
	cfg := w.ServerConfig(base)
	if cfg.MinVersion != tls.VersionTLS13 || len(cfg.NextProtos) != 1 || cfg.GetCertificate == nil {
		t.Fatalf("ServerConfig lost base settings: %+v", cfg)
	}
	if base.GetCertificate != nil {
		t.Fatal("ServerConfig modified its argument")
	}
	if cfg.ClientAuth != tls.NoClientCert {
		t.Fatal("client certificates required without a client CA file")
	}
}
