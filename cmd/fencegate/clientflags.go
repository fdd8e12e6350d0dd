package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/config"
)

// DefaultServer is where the client subcommands find a gateway: `serve`'s
// default HTTP listener.
const DefaultServer = "http://" + config.DefaultHTTPAddr

// clientFlags are the connection flags every client subcommand shares. The
// token is best given as FENCEGATE_TOKEN or --token-file: a --token on the
// command line is visible to every user of the machine in ps.
type clientFlags struct {
	server    string
	token     string
	tokenFile string
	caFile    string
	timeout   time.Duration
	// insecureToken sends the token over plain http:// to a host that is
	// not loopback (the client refuses that otherwise).
	insecureToken bool
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", envOr("FENCEGATE_SERVER", DefaultServer), "gateway base URL (env FENCEGATE_SERVER)")
	fs.StringVar(&f.token, "token", "", "bearer token (prefer env FENCEGATE_TOKEN or --token-file)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token")
	fs.StringVar(&f.caFile, "ca-file", "", "CA certificate to verify an https:// gateway")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "per-request timeout (waiting for a lock adds --wait)")
	fs.BoolVar(&f.insecureToken, "insecure-token", false, "send the token over plain http:// to a non-loopback gateway (a network you trust with it, e.g. a mesh that encrypts between sidecars)")
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
	var opts []client.Option
	if f.caFile != "" {
		opts = append(opts, client.WithCAFile(f.caFile))
	}
	if tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	if f.insecureToken {
		opts = append(opts, client.WithInsecureToken())
	}
	c, err := client.New(f.server, opts...)
	if errors.Is(err, client.ErrPlaintextToken) {
		return nil, fmt.Errorf("%w; on a network you trust with the token, pass --insecure-token", err)
	}
	return c, err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
