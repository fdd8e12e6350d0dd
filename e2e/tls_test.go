package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/internal/certwatch/certtest"
)

// TestTLSListeners: every listener serves TLS from files named in the config
// file, the HTTP listener demands a client certificate when a client CA is
// set, a rotated certificate is served without a restart, and the CLI talks
// to an https gateway with --ca-file.
func TestTLSListeners(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "fencegate-e2e")
	if err := os.MkdirAll(filepath.Join(dir, "serving"), 0o700); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := ca.Server(t, "fencegate", "127.0.0.1", "localhost").Write(t, filepath.Join(dir, "serving"))
	caFile := filepath.Join(dir, "ca.pem")
	certtest.WriteFile(t, caFile, ca.PEM)
	clientCA := certtest.NewCA(t, "clients")
	clientCAFile := filepath.Join(dir, "client-ca.pem")
	certtest.WriteFile(t, clientCAFile, clientCA.PEM)
	clientPair := clientCA.Server(t, "worker")

	cfg := filepath.Join(dir, "fencegate.yaml")
	tlsBlock := fmt.Sprintf("{certFile: %q, keyFile: %q}", certFile, keyFile)
	certtest.WriteFile(t, cfg, []byte(fmt.Sprintf(`
http:
  addr: 127.0.0.1:0
  tls: {certFile: %q, keyFile: %q, clientCAFile: %q}
grpc:
  addr: 127.0.0.1:0
  tls: %s
authz:
  addr: 127.0.0.1:0
  tls: %s
`, certFile, keyFile, clientCAFile, tlsBlock, tlsBlock)))
	g := StartGateway(t, "bolt://"+filepath.Join(dir, "fg.db"), "--config", cfg) // flags put the listeners on free ports

	clientCert, err := tls.X509KeyPair(clientPair.CertPEM, clientPair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	httpsClient := func(withCert bool) *http.Client {
		tc := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		if withCert {
			tc.Certificates = []tls.Certificate{clientCert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	}

	// HTTPS with a client certificate works; without one the handshake fails.
	resp, err := httpsClient(true).Get("https://" + g.HTTP + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("https with a client certificate: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := httpsClient(false).Get("https://" + g.HTTP + "/healthz"); err == nil {
		t.Fatal("https without a client certificate was accepted; clientCAFile must require one")
	}
	// Go's TLS server answers plaintext with a bare 400, never the API.
	if resp, err := http.Get("http://" + g.HTTP + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plaintext HTTP was served on a TLS listener")
		}
	}

	// Both gRPC listeners speak TLS and serve health.
	for name, addr := range map[string]string{"grpc": g.GRPC, "authz": g.Authz} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if err != nil {
			t.Errorf("%s over TLS: health check: %v", name, err)
		}
	}

	// Rotation: a new certificate on disk is served without a restart.
	rotated := ca.Server(t, "fencegate-rotated", "127.0.0.1")
	rotated.Write(t, filepath.Join(dir, "serving"))
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := tls.Dial("tcp", g.Authz, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
		if err == nil {
			serial := conn.ConnectionState().PeerCertificates[0].SerialNumber
			conn.Close()
			if serial.Cmp(rotated.Cert.SerialNumber) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificate was not served within 15 s (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The CLI over https: --ca-file verifies the gateway. The HTTP listener
	// wants a client certificate the CLI does not have, so use a second
	// gateway without clientCAFile for this.
	cfg2 := filepath.Join(dir, "fencegate2.yaml")
	certtest.WriteFile(t, cfg2, []byte(fmt.Sprintf("http:\n  addr: 127.0.0.1:0\n  tls: %s\n", tlsBlock)))
	g2 := StartGateway(t, "bolt://"+filepath.Join(dir, "fg2.db"), "--config", cfg2)
	out, err := exec.Command(binary, "lock", "acquire", "--server", "https://"+g2.HTTP, "--ca-file", caFile, "--key", "tls/1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("lock acquire over https: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "lock", "status", "--server", "https://"+g2.HTTP, "--key", "tls/1").CombinedOutput()
	if err == nil {
		t.Fatalf("the CLI trusted an unknown CA without --ca-file:\n%s", out)
	}
}
