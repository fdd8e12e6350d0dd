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

	"github.com/fencegate/fencegate/lockstore"
	"gopkg.in/yaml.v3"
)

// Defaults for the listeners and the store. Every listener binds loopback by
// default: exposing fencegate is a decision an operator makes explicitly.
//
// Everything else defaults to zero, which means "the default of the package
// the setting is for" (fencecheck.DefaultTimeout, lockserver.DefaultMaxWait, …):
// config is data and restates no package's defaults or enums; where it needs
// a default to validate (a barrier route's maxWait within the cap) it reads
// the owning package's constant. Values are parsed where cmd/fencegate turns
// the Config into those packages' options.
const (
	DefaultStore         = "bolt://./fencegate.db"
	DefaultHTTPAddr      = "127.0.0.1:8080"
	DefaultGRPCAddr      = "127.0.0.1:9090"
	DefaultAuthzAddr     = "127.0.0.1:9191"
	DefaultAdmissionAddr = "127.0.0.1:8443"
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
	Authz     Authz     `yaml:"authz"`
	Admission Admission `yaml:"admission"`

	Tokens []Token `yaml:"tokens"`
	Log    Log     `yaml:"log"`
	Check  Check   `yaml:"check"`
	Audit  Audit   `yaml:"audit"`
	Locks  Locks   `yaml:"locks"`

	// Proxy is the fencing reverse proxy (config/proxy.go).
	Proxy Proxy `yaml:"proxy"`

	// Routes is the route table every edge shares (config/routes.go).
	Routes []Route `yaml:"routes"`
	// RoutesFile is a file of further routes: entries (a YAML document
	// with the one key routes:), read with the config file and re-read
	// when it changes: the ConfigMap `fencegate controller` publishes
	// (FencePolicy), mounted. A missing file has no entries.
	RoutesFile string `yaml:"routesFile"`
	// RoutesFileSum is the SHA-256 (hex) of the routes file's content as
	// read (of nothing when it is missing); set by IncludeRoutesFile.
	RoutesFileSum string `yaml:"-"`

	// Proof signs and verifies write proofs (config/proof.go).
	Proof Proof `yaml:"proof"`
	// Debug is the opt-in profiling listener.
	Debug Debug `yaml:"debug"`
	// Connections bounds every listener's connections.
	Connections Connections `yaml:"connections"`
	// Shutdown is what a SIGTERM or SIGINT does before the listeners
	// drain.
	Shutdown Shutdown `yaml:"shutdown"`
}

// Shutdown configures the lifecycle's draining phase (internal/health).
type Shutdown struct {
	// Delay is how long every listener keeps serving after a SIGTERM or
	// SIGINT while reporting unready (/readyz 503, gRPC health
	// NOT_SERVING), before it stops accepting and drains: the time a load
	// balancer polling readiness needs to stop sending. Zero (the
	// default): drain at once, for a process nothing polls; the Helm chart
	// waits in a preStop hook instead and sets it to what its consumers
	// need.
	Delay Duration `yaml:"delay"`
}

// Connections are the connection slots of every listener (each listener
// has its own): at most MaxPerListener connections, at most MaxPerPeer of
// them from one remote IP (IPv6: one /64). A full listener closes its longest-idle
// connection to admit a new one. Zero fields take the defaults, 1024 and
// 64 (internal/connlimit's DefaultMax, DefaultPerPeer).
type Connections struct {
	MaxPerListener int `yaml:"maxPerListener"`
	// MaxPerPeer: raise it (up to MaxPerListener) when one proxy
	// (nginx forward-auth, Envoy) is the only peer and opens more
	// concurrent connections than the default.
	MaxPerPeer int `yaml:"maxPerPeer"`
	// MaxRequestsPerPeer bounds the requests (HTTP/2 streams and gRPC
	// calls each count) one remote IP has in flight on one listener.
	MaxRequestsPerPeer int `yaml:"maxRequestsPerPeer"`
}

// validate adds the problems of the connection limits.
func (c Connections) validate(add func(format string, args ...any)) {
	if c.MaxPerListener < 0 {
		add("connections.maxPerListener: %d must not be negative (0 is the default, 1024)", c.MaxPerListener)
	}
	if c.MaxPerPeer < 0 {
		add("connections.maxPerPeer: %d must not be negative (0 is the default, 64)", c.MaxPerPeer)
	}
	if c.MaxRequestsPerPeer < 0 {
		add("connections.maxRequestsPerPeer: %d must not be negative (0 is the default, 256)", c.MaxRequestsPerPeer)
	}
	if c.MaxPerListener > 0 && c.MaxPerPeer > c.MaxPerListener {
		add("connections.maxPerPeer: %d is more than connections.maxPerListener (%d)", c.MaxPerPeer, c.MaxPerListener)
	}
}

// MaxShutdownDelay bounds shutdown.delay: a delay is seconds of a load
// balancer's probe period, and a typo of minutes would hold every
// restart for as long.
const MaxShutdownDelay = 5 * time.Minute

func (s Shutdown) validate(add func(format string, args ...any)) {
	if s.Delay < 0 || s.Delay.Std() > MaxShutdownDelay {
		add("shutdown.delay: %s must be between 0 and %s", s.Delay.Std(), MaxShutdownDelay)
	}
}

// Debug configures the net/http/pprof listener. It is off unless Addr is
// set; it never shares a listener with the API, so exposing the API never
// exposes profiles. A non-loopback Addr is allowed (the operator asked for
// it) and logged as a warning when the listener starts.
type Debug struct {
	Addr string `yaml:"addr"`
}

// Enabled reports whether the debug listener is on.
func (d Debug) Enabled() bool { return d.Addr != "" && d.Addr != Off }

// Listener is one network listener. Addr "off" disables it.
type Listener struct {
	Addr string `yaml:"addr"`
	TLS  TLS    `yaml:"tls"`
}

// Enabled reports whether the listener is on.
func (l Listener) Enabled() bool { return l.Addr != "" && l.Addr != Off }

// Authz is the edge's gRPC listener (Envoy ext_authz and ext_proc) and,
// optionally, forward-auth's own HTTP listener.
type Authz struct {
	Listener `yaml:",inline"`
	// HTTP, when its Addr is set, serves forward-auth (/v1/authz/check) on
	// a listener of its own, and the lock API's HTTP listener no longer
	// does: the proxies' port apart from the lock clients'.
	HTTP Listener `yaml:"http"`
}

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
	// Access selects the HTTP access log lines: off, errors or all (the
	// api package parses it; empty is api's default).
	Access string `yaml:"access"`
}

// maxBarrierInFlight is lockstore.MaxInFlightLimit (config imports none
// of the packages it configures; a test holds the two equal).
const maxBarrierInFlight = 8192

// Check configures the edge decision.
type Check struct {
	// Timeout bounds one check's store read; zero is fencecheck.DefaultTimeout.
	Timeout Duration `yaml:"timeout"`
	// AuditRawKeys stores raw keys in audit events (off: only keyHash).
	AuditRawKeys bool `yaml:"auditRawKeys"`
	// HideCurrentFence leaves the current fence out of edge denials.
	HideCurrentFence bool `yaml:"hideCurrentFence"`
	// MaxWriteCap bounds every barrier route's maxWrite, from proxy.routes
	// (refused at load above it) and from ext_proc callers (their writes
	// fail closed above it); zero is DefaultMaxWriteCap.
	MaxWriteCap Duration `yaml:"maxWriteCap"`
	// BarrierMaxInFlight caps one key's writes in flight on barrier routes;
	// zero is lockstore.DefaultMaxInFlight (1024).
	BarrierMaxInFlight int `yaml:"barrierMaxInFlight"`
	// UnmatchedWrites is what a write no route table entry matches gets
	// when a table is configured: deny (the default; 503 unavailable) or
	// defaults (checked as without a table). Reads always pass.
	UnmatchedWrites string `yaml:"unmatchedWrites"`
	// MaxWaitCap bounds every barrier route's maxWait, from proxy.routes
	// (refused at load above it) and from ext_proc callers (their writes
	// fail closed above it); zero is DefaultMaxWaitCap.
	MaxWaitCap Duration `yaml:"maxWaitCap"`
	// BarrierMaxWaiters caps the barrier writes one gateway has waiting at
	// once; zero is fencecheck.DefaultBarrierMaxWaiters (256).
	BarrierMaxWaiters int `yaml:"barrierMaxWaiters"`
	// TrustLoopback trusts an ext_authz, ext_proc or forward-auth caller
	// connecting from a loopback address as the operator's proxy (it may
	// name a table entry with fence_route, send inline route options and
	// ask for the write barrier). Off by default: behind a sidecar (Istio
	// connects every inbound caller from 127.0.0.6, Linkerd from
	// 127.0.0.1) loopback is anyone. 127.0.0.6 is never trusted.
	TrustLoopback bool `yaml:"trustLoopback"`
}

// Audit configures the audit trail. Zero fields take the defaults of
// fencecheck (queue) and lockstore (retention).
type Audit struct {
	QueueSize int `yaml:"queueSize"`
	// MaxEvents bounds the decision class (stale, not-held, unknown,
	// wrong-owner, ...); MaxInputEvents the input class (missing,
	// malformed: denials anyone can provoke), zero meaning MaxEvents. The
	// classes never evict each other's events.
	MaxEvents      int      `yaml:"maxEvents"`
	MaxInputEvents int      `yaml:"maxInputEvents"`
	MaxAge         Duration `yaml:"maxAge"`
}

// Locks configures the lock API.
type Locks struct {
	// MaxWait caps a request's waitMs; zero is lockserver.DefaultMaxWait.
	MaxWait Duration `yaml:"maxWait"`
	// OpTimeout bounds each store call a lock request makes (504 past it);
	// zero is lockserver.DefaultOpTimeout.
	OpTimeout Duration `yaml:"opTimeout"`
}

// Admission configures the Kubernetes validating webhook. It is served only
// when a certificate is configured (the API server speaks only HTTPS).
// Empty fields take the admission and fencecheck packages' defaults.
type Admission struct {
	Addr            string   `yaml:"addr"`
	TLS             TLS      `yaml:"tls"`
	KeyAnnotation   string   `yaml:"keyAnnotation"`
	FenceAnnotation string   `yaml:"fenceAnnotation"`
	Policy          string   `yaml:"policy"` // fencecheck.ParsePolicy
	Mode            string   `yaml:"mode"`   // fencecheck.ParseMode
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
		Authz:     Authz{Listener: Listener{Addr: DefaultAuthzAddr}},
		Admission: Admission{Addr: DefaultAdmissionAddr},
		Log:       Log{Level: "info", Format: "text"},
	}
}

// LoadFile merges the YAML file at path into c. Unknown fields are errors:
// a misspelt option must not be silently ignored.
func (c *Config) LoadFile(path string) error {
	b, err := ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return c.LoadBytes(path, b)
}

// LoadBytes merges the YAML document b, read from path (for messages),
// into c, as LoadFile does.
func (c *Config) LoadBytes(path string, b []byte) error {
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

// Validate checks what config itself owns (addresses, files, the shape of
// tokens, which listeners are on) and returns Problems listing everything
// wrong, or nil. The store URL, enums and token scopes are parsed by the
// packages they belong to, where cmd/fencegate builds their options.
func (c *Config) Validate() error {
	var p Problems
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	for _, l := range []struct {
		name string
		l    Listener
	}{{"http", c.HTTP}, {"grpc", c.GRPC}, {"authz", c.Authz.Listener}, {"authz.http", c.Authz.HTTP}} {
		if !l.l.Enabled() {
			continue
		}
		if _, _, err := net.SplitHostPort(l.l.Addr); err != nil {
			add("%s.addr: %q is not host:port (%v)", l.name, l.l.Addr, err)
		}
		checkTLS(add, l.name+".tls", l.l.TLS)
	}
	if !c.HTTP.Enabled() && !c.GRPC.Enabled() && !c.Authz.Enabled() && !c.Authz.HTTP.Enabled() && !c.Admission.Enabled() && len(c.ProxyEntries()) == 0 {
		add("every listener is off: enable at least one of http, grpc, authz, admission, or set proxy.routes")
	}

	if c.Admission.Addr != Off && c.Admission.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Admission.Addr); err != nil {
			add("admission.addr: %q is not host:port (%v)", c.Admission.Addr, err)
		}
	}
	if c.Admission.TLS.Enabled() {
		checkTLS(add, "admission.tls", c.Admission.TLS)
	}
	if c.Debug.Enabled() {
		if _, _, err := net.SplitHostPort(c.Debug.Addr); err != nil {
			add("debug.addr: %q is not host:port (%v)", c.Debug.Addr, err)
		}
	}
	c.Connections.validate(add)
	c.Shutdown.validate(add)

	// Names, scopes and duplicate secrets are auth.NewAuthenticator's to
	// check; the digest's text is checked here, where the operator who
	// pasted a token instead of its digest is told what to paste.
	for i, t := range c.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		switch d := strings.ToLower(t.SHA256); {
		case !isHex32(d):
			add("%s.sha256: must be the 64-hex-digit SHA-256 of the token (see `fencegate token`), not the token itself", where)
		case strings.Trim(d, "0") == "":
			add("%s.sha256: all zeros is a placeholder, not a token's digest (see `fencegate token`)", where)
		}
	}

	if len(c.Tokens) == 0 && !c.Insecure {
		for _, l := range []struct {
			name string
			l    Listener
		}{{"http", c.HTTP}, {"grpc", c.GRPC}, {"authz.http", c.Authz.HTTP}} {
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
	if c.Check.Timeout < 0 {
		add("check.timeout: must not be negative")
	}
	if c.Check.BarrierMaxInFlight < 0 || c.Check.BarrierMaxInFlight > maxBarrierInFlight {
		add("check.barrierMaxInFlight: must be between 1 and %d (0: the default, %d)", maxBarrierInFlight, lockstore.DefaultMaxInFlight)
	}
	if c.Locks.MaxWait < 0 {
		add("locks.maxWait: must not be negative")
	}
	if c.Locks.OpTimeout < 0 {
		add("locks.opTimeout: must not be negative")
	}
	if c.Audit.QueueSize < 0 || c.Audit.MaxEvents < 0 || c.Audit.MaxInputEvents < 0 || c.Audit.MaxAge < 0 {
		add("audit: queueSize, maxEvents, maxInputEvents and maxAge must not be negative")
	}

	p = append(p, c.routeProblems()...)
	if len(c.Proxy.Routes) > 0 {
		p = append(p, c.Proxy.problems()...)
	}
	p = append(p, c.maxWriteCapProblems()...)
	p = append(p, c.maxWaitProblems()...)
	p = append(p, c.ProofKeyProblems()...)
	c.validateProof(add)

	if len(p) > 0 {
		return p
	}
	return nil
}

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

// redactURL hides secrets in a URL for messages: the userinfo password and
// query parameters that carry one (pgx's password=, go-redis's
// sentinel_password=, …). A secret may hold any of / ? # @ unescaped (a URL
// that then does not parse is exactly the one an error message repeats), so
// a secret parameter's value runs to the next '&' or the end, and the
// userinfo is everything up to the last '@' that is left: a '@' elsewhere
// makes it hide more than the password, never less.
func redactURL(u string) string {
	scheme := strings.Index(u, "://")
	if scheme < 0 {
		return u
	}
	out := redactSecretParams(u, scheme+3)
	rest := out[scheme+3:]
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if i := strings.Index(rest[:at], ":"); i >= 0 {
			rest = rest[:i] + ":xxxxx" + rest[at:]
		}
	}
	return out[:scheme+3] + rest
}

// redactSecretParams replaces, after from, the value of every "name=value"
// that follows a '?' or '&' and whose name is a secret's, up to the next
// '&' or the end.
func redactSecretParams(u string, from int) string {
	var b strings.Builder
	b.WriteString(u[:from])
	for i := from; i < len(u); {
		c := u[i]
		b.WriteByte(c)
		i++
		if c != '?' && c != '&' {
			continue
		}
		end := strings.IndexByte(u[i:], '&')
		if end < 0 {
			end = len(u) - i
		}
		if name, _, ok := strings.Cut(u[i:i+end], "="); ok && secretParam(name) {
			b.WriteString(name + "=xxxxx")
			i += end
		}
	}
	return b.String()
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
