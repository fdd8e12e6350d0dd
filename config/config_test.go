package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	build := Flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return build(func(k string) string { return env[k] })
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fencegate.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsAreValidAndLoopback(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if c.Store != DefaultStore || c.HTTP.Addr != DefaultHTTPAddr || c.GRPC.Addr != DefaultGRPCAddr || c.Authz.Addr != DefaultAuthzAddr {
		t.Fatalf("unexpected defaults: %+v", c)
	}
	if c.Admission.Enabled() {
		t.Fatal("admission must be off without a certificate")
	}
	// Zero means the default of the package the setting is for.
	if c.Check.Timeout != 0 || c.Locks != (Locks{}) || c.Audit != (Audit{}) || c.Admission.Policy != "" || c.Admission.Mode != "" {
		t.Fatalf("config restates a package default: %+v", c)
	}
}

func TestPrecedenceFileEnvFlag(t *testing.T) {
	path := writeFile(t, "store: redis://file:6379/0\nhttp:\n  addr: 127.0.0.1:1111\ngrpc:\n  addr: 127.0.0.1:2222\nlog:\n  level: debug\n")
	c, err := load(t, []string{"--config", path, "--http-addr", "127.0.0.1:3333"},
		map[string]string{"FENCEGATE_STORE": "postgres://env/db", "FENCEGATE_HTTP_ADDR": "127.0.0.1:4444"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "postgres://env/db" {
		t.Errorf("env must override file: store=%q", c.Store)
	}
	if c.HTTP.Addr != "127.0.0.1:3333" {
		t.Errorf("flag must override env: http=%q", c.HTTP.Addr)
	}
	if c.GRPC.Addr != "127.0.0.1:2222" || c.Log.Level != "debug" {
		t.Errorf("file values lost: %+v", c)
	}
}

func TestConfigFromEnv(t *testing.T) {
	path := writeFile(t, "store: bolt:///tmp/x.db\n")
	c, err := load(t, nil, map[string]string{"FENCEGATE_CONFIG": path, "FENCEGATE_INSECURE": "true"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "bolt:///tmp/x.db" || !c.Insecure {
		t.Fatalf("got %+v", c)
	}
}

func TestUnknownFieldRejected(t *testing.T) {
	path := writeFile(t, "stroe: bolt://./x.db\n")
	_, err := load(t, []string{"--config", path}, nil)
	if err == nil || !strings.Contains(err.Error(), "stroe") {
		t.Fatalf("want an error naming the unknown field, got %v", err)
	}
}

func TestEmptyFileIsEmptyConfig(t *testing.T) {
	path := writeFile(t, "")
	if _, err := load(t, []string{"--config", path}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestEveryProblemListed(t *testing.T) {
	path := writeFile(t, `
store: mysql://nope
http:
  addr: "0.0.0.0:8080"
grpc:
  addr: "nonsense"
log:
  level: loud
  format: xml
tokens:
  - name: ci
    sha256: not-a-hash
    operations: [acquire, fly]
  - name: ci
    sha256: 0000000000000000000000000000000000000000000000000000000000000000
  - name: ci2
    sha256: 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08
  - name: ci3
    sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
check:
  timeout: -1s
`)
	_, err := load(t, []string{"--config", path, "--insecure=maybe"}, nil)
	var p Problems
	if !errors.As(err, &p) {
		t.Fatalf("want Problems, got %v", err)
	}
	// The store URL and token names and operations are the packages' to parse
	// (cmd/fencegate's loadServeConfig adds their problems to this list).
	for _, want := range []string{"grpc.addr", "log.level", "log.format", "tokens[0].sha256", "check.timeout", "--insecure", "placeholder"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems do not mention %q:\n%v", want, err)
		}
	}
}

func TestNonLoopbackNeedsTokensOrInsecure(t *testing.T) {
	cases := []struct {
		name string
		args []string
		ok   bool
	}{
		{"loopback", []string{"--http-addr", "127.0.0.1:8080"}, true},
		{"localhost", []string{"--http-addr", "localhost:8080"}, true},
		{"ipv6 loopback", []string{"--http-addr", "[::1]:8080"}, true},
		{"all interfaces", []string{"--http-addr", ":8080"}, false},
		{"public grpc", []string{"--grpc-addr", "0.0.0.0:9090"}, false},
		{"insecure", []string{"--http-addr", "0.0.0.0:8080", "--insecure"}, true},
		{"authz may bind wide", []string{"--authz-addr", "0.0.0.0:9191"}, true},
		{"off", []string{"--http-addr", "off", "--grpc-addr", "off"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.args, nil)
			if (err == nil) != tc.ok {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}
		})
	}
}

func TestAdmissionNeedsCertPair(t *testing.T) {
	_, err := load(t, []string{"--admission-tls-cert", "/nonexistent/cert.pem"}, nil)
	if err == nil || !strings.Contains(err.Error(), "go together") || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("got %v", err)
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("admission-tls-cert"); got != "FENCEGATE_ADMISSION_TLS_CERT" {
		t.Fatal(got)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://user:secret@h:6379/0": "redis://user:xxxxx@h:6379/0",
		"postgres://u:p@h/db?x=1":      "postgres://u:xxxxx@h/db?x=1",
		"bolt://./fencegate.db":        "bolt://./fencegate.db",
		"redis://:onlypass@h:6379":     "redis://:xxxxx@h:6379",
		// Unescaped / ? # @ in the password (the URLs that do not parse).
		"redis://user:pa?ss@h:6379/0":                 "redis://user:xxxxx@h:6379/0",
		"redis://user:pa#ss@h:6379/0":                 "redis://user:xxxxx@h:6379/0",
		"postgres://u:a/b?c#d@e@h/db?sslmode=disable": "postgres://u:xxxxx@h/db?sslmode=disable",
		"redis://h:6379/0?sentinel_password=s3cret":   "redis://h:6379/0?sentinel_password=xxxxx",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConnectionLimits: the keys, their flags and environment variables
// set the limits; a negative value, a per-peer cap above the listener's
// and a non-number are each listed.
func TestConnectionLimits(t *testing.T) {
	path := writeFile(t, "connections:\n  maxPerListener: 512\n  maxRequestsPerPeer: 100\n")
	c, err := load(t, []string{"--config", path, "--max-conns-per-peer", "16"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Connections != (Connections{MaxPerListener: 512, MaxPerPeer: 16, MaxRequestsPerPeer: 100}) {
		t.Fatalf("got %+v", c.Connections)
	}
	if c, err = load(t, nil, map[string]string{"FENCEGATE_MAX_CONNS": "2048"}); err != nil || c.Connections.MaxPerListener != 2048 {
		t.Fatalf("env: %+v, %v", c.Connections, err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--max-conns", "-1", "--max-conns-per-peer", "-2"}, []string{"connections.maxPerListener: -1", "connections.maxPerPeer: -2"}},
		{[]string{"--max-conns", "8", "--max-conns-per-peer", "9"}, []string{"connections.maxPerPeer: 9 is more than connections.maxPerListener (8)"}},
		{[]string{"--max-conns", "many"}, []string{"--max-conns: must be an integer"}},
		{[]string{"--max-requests-per-peer", "-1"}, []string{"connections.maxRequestsPerPeer: -1 must not be negative"}},
	} {
		_, err := load(t, tc.args, nil)
		var p Problems
		if !errors.As(err, &p) {
			t.Fatalf("%v: want Problems, got %v", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: problems do not mention %q:\n%v", tc.args, w, err)
			}
		}
	}
	// The proxy validates them too.
	c = Default()
	c.Connections.MaxPerPeer = -1
	if err := c.ValidateProxy(); err == nil || !strings.Contains(err.Error(), "connections.maxPerPeer") {
		t.Fatalf("ValidateProxy: %v", err)
	}
}
