package client_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/internal/certwatch/certtest"
	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc"
)

// tlsGateway serves both listeners with a certificate for 127.0.0.1 and
// localhost from a fresh CA, and returns the CA's PEM file.
func tlsGateway(t *testing.T) (*gatewayEnv, *certtest.CA, string) {
	t.Helper()
	ca := certtest.NewCA(t, "fencegate-test-ca")
	pair := ca.Server(t, "fencegate", "127.0.0.1", "localhost")
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	g := gatewayWith(t, gatewayConfig{tls: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	return g, ca, caFile
}

// TestTLS: both clients verify the gateway with WithCAFile or
// WithTLSConfig, and refuse one they cannot verify.
func TestTLS(t *testing.T) {
	g, ca, caFile := tlsGateway(t)
	ctx := context.Background()
	other := certtest.NewCA(t, "someone-else")
	forEachKind(t, func(t *testing.T, k kind) {
		for name, opt := range map[string]client.Option{
			"WithCAFile":    client.WithCAFile(caFile),
			"WithTLSConfig": client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()}),
		} {
			t.Run(name, func(t *testing.T) {
				c := k.client(t, k.addr(g), token, opt)
				r, err := c.Acquire(ctx, "orders/"+k.name+"/"+name, time.Second)
				if err != nil || !r.OK {
					t.Fatalf("acquire over TLS: %+v %v", r, err)
				}
			})
		}
		t.Run("unknown CA", func(t *testing.T) {
			c := k.client(t, k.addr(g), token, client.WithTLSConfig(&tls.Config{RootCAs: other.Pool()}))
			_, err := c.IsLocked(ctx, "orders/1")
			if lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
				t.Fatalf("err = %v, want ServiceUnavailable", err)
			}
		})
	})
}

// TestConstructorsRefuse: what each constructor refuses, before any I/O.
func TestConstructorsRefuse(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		new  func() error
	}{
		{"empty URL", func() error { _, err := client.New(""); return err }},
		{"URL without scheme", func() error { _, err := client.New("127.0.0.1:8080"); return err }},
		{"ftp URL", func() error { _, err := client.New("ftp://h"); return err }},
		{"URL without host", func() error { _, err := client.New("http://"); return err }},
		{"empty gRPC target", func() error { _, err := client.NewGRPC(" "); return err }},
		{"gRPC target gRPC cannot parse", func() error { _, err := client.NewGRPC("dns://a/b/%zz"); return err }},
		{"WithDialOptions for HTTP", func() error {
			_, err := client.New("http://127.0.0.1:8080", client.WithDialOptions(grpc.WithUserAgent("x")))
			return err
		}},
		{"WithHTTPClient for gRPC", func() error {
			_, err := client.NewGRPC("127.0.0.1:9090", client.WithHTTPClient(&http.Client{}))
			return err
		}},
		{"TLS options with an http:// URL", func() error {
			_, err := client.New("http://127.0.0.1:8080", client.WithTLSConfig(nil))
			return err
		}},
		{"TLS options with WithHTTPClient", func() error {
			_, err := client.New("https://127.0.0.1:8080", client.WithTLSConfig(nil), client.WithHTTPClient(&http.Client{}))
			return err
		}},
		{"missing CA file (HTTP)", func() error { _, err := client.New("https://h:1", client.WithCAFile(missing)); return err }},
		{"missing CA file (gRPC)", func() error { _, err := client.NewGRPC("h:1", client.WithCAFile(missing)); return err }},
		{"CA file without PEM (HTTP)", func() error { _, err := client.New("https://h:1", client.WithCAFile(notPEM)); return err }},
		{"CA file without PEM (gRPC)", func() error { _, err := client.NewGRPC("h:1", client.WithCAFile(notPEM)); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.new(); lockstore.CodeOf(err) != lockstore.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
		})
	}
}

// TestClosedGRPCClient: a call after Close is the caller's mistake, not a
// cancellation (Aborted) the caller did not make.
func TestClosedGRPCClient(t *testing.T) {
	g := gateway(t)
	c, err := client.NewGRPC(g.grpcAddr, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.IsLocked(context.Background(), "orders/1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.IsLocked(context.Background(), "orders/1"); lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Fatalf("call after Close: %v, want InvalidArgument", err)
	}
}
