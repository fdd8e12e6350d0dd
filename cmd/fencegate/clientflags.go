package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/client"
)

// DefaultServer is where the client subcommands find a gateway.
const DefaultServer = "http://127.0.0.1:8080"

// clientFlags are the connection flags every client subcommand shares. The
// token is best given as FENCEGATE_TOKEN or --token-file: a --token on the
// command line is visible to every user of the machine in ps.
type clientFlags struct {
	server    string
	token     string
	tokenFile string
	caFile    string
	timeout   time.Duration
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", envOr("FENCEGATE_SERVER", DefaultServer), "gateway base URL (env FENCEGATE_SERVER)")
	fs.StringVar(&f.token, "token", "", "bearer token (prefer env FENCEGATE_TOKEN or --token-file)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token")
	fs.StringVar(&f.caFile, "ca-file", "", "CA certificate to verify an https:// gateway")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "per-request timeout (waiting for a lock adds --wait)")
}

func (f *clientFlags) client() (*client.Client, error) {
	tok := f.token
	if tok == "" {
		tok = os.Getenv("FENCEGATE_TOKEN")
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	hc := &http.Client{}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file: no certificate in %s", f.caFile)
		}
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	opts := []client.Option{client.WithHTTPClient(hc)}
	if tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	return client.New(f.server, opts...)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
