package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
)

// Defaults of the fencing reverse proxy (`fencegate proxy`, or the proxy
// listener of `fencegate serve` when proxy.routes is set).
const (
	DefaultProxyAddr = "127.0.0.1:8000"
	// DefaultProxyShutdownTimeout bounds the drain on SIGTERM; it is raised
	// to the longest barrier route's maxWait + maxWrite plus a margin, so
	// that an in-flight barrier write can finish and deregister.
	DefaultProxyShutdownTimeout = 20 * time.Second
)

// Proxy configures the fencing reverse proxy.
type Proxy struct {
	// Addr is the proxy's listener (default 127.0.0.1:8000).
	Addr string `yaml:"addr"`
	TLS  TLS    `yaml:"tls"`
	// MetricsAddr serves /metrics, /healthz and /readyz for a standalone
	// `fencegate proxy` ("" or "off": none). `fencegate serve` has its own.
	MetricsAddr string `yaml:"metricsAddr"`
	// TrustForwarded keeps the client's X-Forwarded-* (behind another
	// trusted proxy only).
	TrustForwarded bool `yaml:"trustForwarded"`
	// ShutdownTimeout bounds the drain on SIGTERM (default 20 s, raised to
	// the longest maxWait + maxWrite + 5 s).
	ShutdownTimeout Duration `yaml:"shutdownTimeout"`
	// Routes map path prefixes to upstreams: the older spelling of
	// routes: entries with an upstream, each of which becomes one at load
	// (Config.RouteTable). `fencegate serve` runs the proxy listener only
	// when the table has entries with an upstream.
	Routes []ProxyRoute `yaml:"routes"`
}

// ProxyRoute is one route of the proxy: a path prefix, its upstream and its
// fencing options, named as the ext_authz route options are.
type ProxyRoute struct {
	Name     string `yaml:"name"`
	Prefix   string `yaml:"prefix"`   // "/orders": "/orders" and below; "/" for everything
	Upstream string `yaml:"upstream"` // http:// or https:// URL
	// Key is a literal key or a template over path segments
	// ("orders/{2}"); empty: the key comes from KeyHeader.
	Key         string `yaml:"key"`
	KeyHeader   string `yaml:"keyHeader"`   // default x-fence-key
	FenceHeader string `yaml:"fenceHeader"` // default x-fence-token
	Policy      string `yaml:"policy"`      // holder (default), latest, off
	Mode        string `yaml:"mode"`        // enforce (default), dry-run, warn
	// Methods are the write methods ("POST,PUT" or "*"); default every
	// method but GET, HEAD and OPTIONS.
	Methods string `yaml:"methods"`
	// Proof is what a write must carry besides its fence: none (default),
	// lockId or signed (a write proof from acquire, x-fence-proof).
	Proof string `yaml:"proof"`
	// Barrier turns the write barrier on; MaxWrite bounds a barrier
	// write (default 30 s); MaxWait bounds how long a newer fence waits
	// for an older write in flight before it is refused draining (default
	// 5 s).
	Barrier      bool     `yaml:"barrier"`
	MaxWrite     Duration `yaml:"maxWrite"`
	MaxWait      Duration `yaml:"maxWait"`
	PreserveHost bool     `yaml:"preserveHost"`
	// Upgrade lets the route's reads switch protocols (WebSocket, h2c);
	// off by default, never for a fenced write.
	Upgrade bool `yaml:"upgrade"`
	// BodyIdleTimeout cuts a request whose client sends no body byte for
	// this long (default 30 s); BodyTimeout bounds the whole body (default
	// 2 min; a barrier route's maxWrite, which it may only shorten).
	BodyIdleTimeout Duration `yaml:"bodyIdleTimeout"`
	BodyTimeout     Duration `yaml:"bodyTimeout"`
}

// ProxyAddr is the proxy listener's address with its default.
func (p Proxy) ProxyAddr() string {
	if p.Addr == "" {
		return DefaultProxyAddr
	}
	return p.Addr
}

// Drain is proxy.shutdownTimeout with its default (Config.Drain raises it
// for barrier routes).
func (p Proxy) Drain() time.Duration {
	d := p.ShutdownTimeout.Std()
	if d <= 0 {
		d = DefaultProxyShutdownTimeout
	}
	return d
}

// Drain is how long a SIGTERM waits for in-flight requests: proxy.Drain,
// raised for the table's barrier entries with an upstream.
func (c *Config) Drain() time.Duration {
	d := c.Proxy.Drain()
	for _, r := range c.ProxyEntries() {
		if !r.Barrier {
			continue
		}
		mw := r.MaxWrite.Std()
		if mw <= 0 {
			mw = fencecheck.DefaultMaxWrite // a barrier route's maxWrite when unset
		}
		// A write may wait at the barrier before its exchange starts.
		d = max(d, r.EffectiveMaxWait()+mw+5*time.Second)
	}
	return d
}

// routeProblems lists what is wrong with proxy.routes' entries: part of
// the route table, so a reload checks them as the start does
// (Config.routeProblems).
func (p Proxy) routeProblems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for i, r := range p.Routes {
		where := fmt.Sprintf("proxy.routes[%d]", i)
		if r.Name != "" {
			where += fmt.Sprintf(" (%s)", r.Name)
		}
		if !strings.HasPrefix(r.Prefix, "/") {
			add("%s.prefix: %q must start with '/'", where, r.Prefix)
		}
		u, err := url.Parse(r.Upstream)
		switch {
		case r.Upstream == "":
			add("%s.upstream: required (an http:// or https:// URL)", where)
		case err != nil:
			add("%s.upstream: %v", where, err)
		case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			add("%s.upstream: %q must be an http:// or https:// URL with a host", where, r.Upstream)
		}
		if r.Key != "" && r.KeyHeader != "" {
			add("%s: key and keyHeader exclude each other", where)
		}
		if r.MaxWrite < 0 {
			add("%s.maxWrite: must not be negative", where)
		}
		if r.MaxWrite > 0 && !r.Barrier {
			add("%s.maxWrite: set without barrier: true", where)
		}
		if r.MaxWrite > 0 && (r.MaxWrite.Std() < time.Millisecond || r.MaxWrite.Std() > lockstore.MaxWriteLimit) {
			add("%s.maxWrite: must be between 1ms and 24h", where)
		}
		for _, d := range []struct {
			name string
			v    Duration
		}{{"bodyIdleTimeout", r.BodyIdleTimeout}, {"bodyTimeout", r.BodyTimeout}} {
			if d.v != 0 && (d.v.Std() < time.Millisecond || d.v.Std() > 24*time.Hour) {
				add("%s.%s: must be between 1ms and 24h", where, d.name)
			}
		}
	}
	return out
}

// problems lists what is wrong with the proxy section, as Validate's
// "proxy…: …" lines. The route options that need fencecheck (policy, mode,
// methods, key templates) are checked again when the proxy is built, and
// reported with these before anything starts.
func (p Proxy) problems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if _, _, err := net.SplitHostPort(p.ProxyAddr()); err != nil {
		add("proxy.addr: %q is not host:port (%v)", p.Addr, err)
	}
	if p.MetricsAddr != "" && p.MetricsAddr != Off {
		if _, _, err := net.SplitHostPort(p.MetricsAddr); err != nil {
			add("proxy.metricsAddr: %q is not host:port (%v)", p.MetricsAddr, err)
		}
	}
	checkTLS(add, "proxy.tls", p.TLS)
	if p.ShutdownTimeout < 0 {
		add("proxy.shutdownTimeout: must not be negative")
	}
	return out
}

// ValidateProxy checks what `fencegate proxy` needs: logging, the check
// and audit settings, and the proxy section. The gateway's own listeners
// (http, grpc, authz, admission) are not used and not checked; the store
// URL is parsed by the table of backends in cmd, into the same list.
func (c *Config) ValidateProxy() error {
	var p Problems
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p = append(p, fmt.Sprintf("log.level: %q must be debug, info, warn or error", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		p = append(p, fmt.Sprintf("log.format: %q must be text or json", c.Log.Format))
	}
	if c.Check.Timeout < 0 {
		p = append(p, "check.timeout: must not be negative")
	}
	if c.Check.BarrierMaxInFlight < 0 || c.Check.BarrierMaxInFlight > maxBarrierInFlight {
		p = append(p, fmt.Sprintf("check.barrierMaxInFlight: must be between 1 and %d (0: the default, %d)", maxBarrierInFlight, lockstore.DefaultMaxInFlight))
	}
	c.Connections.validate(func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) })
	c.Shutdown.validate(func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) })
	if c.Audit.QueueSize < 0 || c.Audit.MaxEvents < 0 || c.Audit.MaxInputEvents < 0 || c.Audit.MaxAge < 0 {
		p = append(p, "audit: queueSize, maxEvents, maxInputEvents and maxAge must not be negative")
	}
	p = append(p, c.Proxy.problems()...)
	p = append(p, c.routeProblems()...)
	if len(c.ProxyEntries()) == 0 {
		p = append(p, "proxy.routes: at least one route is required (proxy.routes, or routes: entries with an upstream)")
	}
	p = append(p, c.maxWriteCapProblems()...)
	p = append(p, c.maxWaitProblems()...)
	p = append(p, c.ProofKeyProblems()...)
	if len(p) > 0 {
		return p
	}
	return nil
}
