// Package config turns fencegate's YAML config file, FENCEGATE_* environment
// variables and command-line flags into one validated Config.
//
// Precedence, lowest first: built-in defaults, the config file, the
// environment, flags. Validation reports every problem at once, so a bad
// deployment is fixed in one edit, not one restart per mistake.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults for the listeners and the store. Every listener binds loopback by
// default: exposing fencegate is a decision an operator makes explicitly.
const (
	DefaultStore         = "bolt://./fencegate.db"
	DefaultHTTPAddr      = "127.0.0.1:8080"
	DefaultGRPCAddr      = "127.0.0.1:9090"
	DefaultAuthzAddr     = "127.0.0.1:9191"
	DefaultAdmissionAddr = "127.0.0.1:8443"
	// DefaultCheckTimeout stays under Envoy's 200 ms default ext_authz
	// timeout, so Envoy hears our fail-closed 503 rather than its own error.
	DefaultCheckTimeout = 150 * time.Millisecond
	DefaultMaxWait      = 30 * time.Second
	DefaultOpTimeout    = 5 * time.Second
)

// Off disables a listener when given as its address.
const Off = "off"

// Config is everything `fencegate serve` needs.
type Config struct {
	// Store is the store URL: bolt://, redis://, rediss://, redis+sentinel://,
	// postgres://, postgresql:// or firestore://.
	Store string `yaml:"store"`
	// Insecure allows the lock API to listen beyond loopback without tokens.
	Insecure bool `yaml:"insecure"`

	HTTP      Listener  `yaml:"http"`
	GRPC      Listener  `yaml:"grpc"`
	Authz     Listener  `yaml:"authz"`
	Admission Admission `yaml:"admission"`

	Tokens []Token `yaml:"tokens"`
	Log    Log     `yaml:"log"`
	Check  Check   `yaml:"check"`
	Audit  Audit   `yaml:"audit"`
	Locks  Locks   `yaml:"locks"`
}

// Listener is one network listener. Addr "off" disables it.
type Listener struct {
	Addr string `yaml:"addr"`
	TLS  TLS    `yaml:"tls"`
}

// Enabled reports whether the listener is on.
func (l Listener) Enabled() bool { return l.Addr != "" && l.Addr != Off }

// TLS names certificate files; they are re-read when they change. With
// ClientCAFile set, clients must present a certificate signed by it.
type TLS struct {
	CertFile     string `yaml:"certFile"`
	KeyFile      string `yaml:"keyFile"`
	ClientCAFile string `yaml:"clientCAFile"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Token is one bearer token: its name (for logs), the hex SHA-256 of the
// secret (the secret itself is never in the config), the key prefixes and
// the operations it may use.
type Token struct {
	Name       string   `yaml:"name"`
	SHA256     string   `yaml:"sha256"`
	Prefixes   []string `yaml:"prefixes"`
	Operations []string `yaml:"operations"`
}

// Log configures structured logging.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text, json
}

// Check configures the edge decision.
type Check struct {
	Timeout Duration `yaml:"timeout"`
	// AuditRawKeys stores raw keys in audit events (off: only keyHash).
	AuditRawKeys bool `yaml:"auditRawKeys"`
}

// Audit configures the audit trail.
type Audit struct {
	QueueSize int      `yaml:"queueSize"`
	MaxEvents int      `yaml:"maxEvents"`
	MaxAge    Duration `yaml:"maxAge"`
}

// Locks configures the lock API.
type Locks struct {
	// MaxWait caps a request's waitMs.
	MaxWait Duration `yaml:"maxWait"`
	// OpTimeout bounds each store call a lock request makes (504 past it).
	OpTimeout Duration `yaml:"opTimeout"`
}

// Admission configures the Kubernetes validating webhook. It is served only
// when a certificate is configured (the API server speaks only HTTPS).
type Admission struct {
	Addr            string   `yaml:"addr"`
	TLS             TLS      `yaml:"tls"`
	KeyAnnotation   string   `yaml:"keyAnnotation"`
	FenceAnnotation string   `yaml:"fenceAnnotation"`
	Policy          string   `yaml:"policy"` // holder, latest
	Mode            string   `yaml:"mode"`   // enforce, dry-run, warn
	Resources       []string `yaml:"resources"`
	ExemptUsers     []string `yaml:"exemptUsers"`
	ExemptGroups    []string `yaml:"exemptGroups"`
	ServiceAccount  string   `yaml:"serviceAccount"`
}

// Enabled reports whether the webhook listener is on.
func (a Admission) Enabled() bool { return a.Addr != Off && a.TLS.Enabled() }

// Duration is a time.Duration written as "150ms", "30s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration must be a string like \"150ms\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// Std returns the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Default returns the configuration `fencegate serve` runs with when nothing
// is set: the embedded store, every listener on loopback, no tokens.
func Default() Config {
	return Config{
		Store:     DefaultStore,
		HTTP:      Listener{Addr: DefaultHTTPAddr},
		GRPC:      Listener{Addr: DefaultGRPCAddr},
		Authz:     Listener{Addr: DefaultAuthzAddr},
		Admission: Admission{Addr: DefaultAdmissionAddr, KeyAnnotation: "fencegate.io/key", FenceAnnotation: "fencegate.io/fence", Policy: "holder", Mode: "enforce"},
		Log:       Log{Level: "info", Format: "text"},
		Check:     Check{Timeout: Duration(DefaultCheckTimeout)},
		Audit:     Audit{QueueSize: 4096},
		Locks:     Locks{MaxWait: Duration(DefaultMaxWait), OpTimeout: Duration(DefaultOpTimeout)},
	}
}

// LoadFile merges the YAML file at path into c. Unknown fields are errors:
// a misspelt option must not be silently ignored.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// An empty file decodes to io.EOF: treat it as an empty config.
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Problems is a validation failure listing every problem found.
type Problems []string

func (p Problems) Error() string {
	return "invalid configuration:\n  - " + strings.Join(p, "\n  - ")
}

// Validate checks c and returns Problems listing everything wrong, or nil.
func (c *Config) Validate() error {
	var p Problems
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	if c.Store == "" {
		add("store: a store URL is required (e.g. %s)", DefaultStore)
	} else if !knownStoreScheme(c.Store) {
		add("store: unsupported URL %q: use bolt://, redis://, rediss://, redis+sentinel://, postgres:// or firestore://", redactURL(c.Store))
	}

	for _, l := range []struct {
		name string
		l    Listener
	}{{"http", c.HTTP}, {"grpc", c.GRPC}, {"authz", c.Authz}} {
		if !l.l.Enabled() {
			continue
		}
		if _, _, err := net.SplitHostPort(l.l.Addr); err != nil {
			add("%s.addr: %q is not host:port (%v)", l.name, l.l.Addr, err)
		}
		checkTLS(add, l.name+".tls", l.l.TLS)
	}
	if !c.HTTP.Enabled() && !c.GRPC.Enabled() && !c.Authz.Enabled() && !c.Admission.Enabled() {
		add("every listener is off: enable at least one of http, grpc, authz, admission")
	}

	if c.Admission.Addr != Off && c.Admission.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Admission.Addr); err != nil {
			add("admission.addr: %q is not host:port (%v)", c.Admission.Addr, err)
		}
	}
	if c.Admission.TLS.Enabled() {
		checkTLS(add, "admission.tls", c.Admission.TLS)
		if c.Admission.KeyAnnotation == "" || c.Admission.FenceAnnotation == "" {
			add("admission: keyAnnotation and fenceAnnotation must not be empty")
		} else if c.Admission.KeyAnnotation == c.Admission.FenceAnnotation {
			add("admission: keyAnnotation and fenceAnnotation must differ")
		}
		switch c.Admission.Policy {
		case "holder", "latest":
		default:
			add("admission.policy: %q must be holder or latest", c.Admission.Policy)
		}
		switch c.Admission.Mode {
		case "enforce", "dry-run", "warn":
		default:
			add("admission.mode: %q must be enforce, dry-run or warn", c.Admission.Mode)
		}
	}

	names := map[string]bool{}
	digests := map[string]string{}
	for i, t := range c.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		if t.Name == "" {
			add("%s.name: required", where)
		} else if names[t.Name] {
			add("%s.name: %q is used twice", where, t.Name)
		}
		names[t.Name] = true
		switch d := strings.ToLower(t.SHA256); {
		case !isHex32(d):
			add("%s.sha256: must be the 64-hex-digit SHA-256 of the token (see `fencegate token`), not the token itself", where)
		case strings.Trim(d, "0") == "":
			add("%s.sha256: all zeros is a placeholder, not a token's digest (see `fencegate token`)", where)
		case digests[d] != "":
			add("%s.sha256: the same digest as token %q: two names for one secret", where, digests[d])
		default:
			digests[d] = t.Name
		}
		for _, op := range t.Operations {
			if op != "*" && !validOps[op] {
				add("%s.operations: unknown operation %q (use %s, or * for all)", where, op, strings.Join(OperationNames, ", "))
			}
		}
	}

	if len(c.Tokens) == 0 && !c.Insecure {
		for _, l := range []struct {
			name string
			l    Listener
		}{{"http", c.HTTP}, {"grpc", c.GRPC}} {
			if l.l.Enabled() && !IsLoopback(l.l.Addr) {
				add("%s.addr: %s is not a loopback address and no tokens are configured; add tokens or pass --insecure", l.name, l.l.Addr)
			}
		}
	}

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level: %q must be debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		add("log.format: %q must be text or json", c.Log.Format)
	}
	if c.Check.Timeout <= 0 {
		add("check.timeout: must be positive")
	}
	if c.Locks.MaxWait < 0 {
		add("locks.maxWait: must not be negative")
	}
	if c.Locks.OpTimeout <= 0 {
		add("locks.opTimeout: must be positive")
	}
	if c.Audit.QueueSize < 0 || c.Audit.MaxEvents < 0 || c.Audit.MaxAge < 0 {
		add("audit: queueSize, maxEvents and maxAge must not be negative")
	}

	if len(p) > 0 {
		return p
	}
	return nil
}

// OperationNames are the operations a token can be granted.
var OperationNames = []string{"acquire", "release", "extend", "lookup", "status", "audit", "ui"}

var validOps = func() map[string]bool {
	m := map[string]bool{}
	for _, o := range OperationNames {
		m[o] = true
	}
	return m
}()

func checkTLS(add func(string, ...any), where string, t TLS) {
	if !t.Enabled() {
		if t.ClientCAFile != "" {
			add("%s.clientCAFile: needs certFile and keyFile", where)
		}
		return
	}
	if t.CertFile == "" || t.KeyFile == "" {
		add("%s: certFile and keyFile go together", where)
	}
	for _, f := range []string{t.CertFile, t.KeyFile, t.ClientCAFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			add("%s: %v", where, err)
		}
	}
}

func isHex32(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// IsLoopback reports whether the host of addr is a loopback address or
// "localhost". An empty host (":8080") means every interface: not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func knownStoreScheme(u string) bool {
	for _, s := range []string{"bolt://", "redis://", "rediss://", "redis+sentinel://", "postgres://", "postgresql://", "firestore://"} {
		if strings.HasPrefix(u, s) {
			return true
		}
	}
	return false
}

// redactURL hides secrets in a URL for messages: the userinfo password and
// query parameters that carry one (pgx's password=, go-redis's
// sentinel_password=, …).
func redactURL(u string) string {
	scheme := strings.Index(u, "://")
	if scheme < 0 {
		return u
	}
	rest, query, hasQuery := strings.Cut(u[scheme+3:], "?")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if i := strings.Index(rest[:at], ":"); i >= 0 {
			rest = rest[:i] + ":xxxxx" + rest[at:]
		}
	}
	out := u[:scheme+3] + rest
	if !hasQuery {
		return out
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		name, _, _ := strings.Cut(p, "=")
		if secretParam(name) {
			params[i] = name + "=xxxxx"
		}
	}
	return out + "?" + strings.Join(params, "&")
}

func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"password", "passwd", "secret", "token", "sslkey"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// RedactURL hides the password in a store URL, for logs and messages.
func RedactURL(u string) string { return redactURL(u) }
