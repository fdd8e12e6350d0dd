package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencegate/fencegate/lockstore"
	"gopkg.in/yaml.v3"
)

// Route is one entry of the route table (the top-level `routes:` list), shared
// by every edge: Envoy ext_authz and ext_proc, forward-auth, `fencegate proxy`
// and the proxy listener of `fencegate serve`. A request is governed by the
// entry its trusted caller names (`fence_route`), else by the entry its host,
// path and method match (precedence as in the Gateway API). An entry with an
// Upstream is also served by the fencing reverse proxy, matched the same
// way; the proxy refuses a request whose entry has none.
//
// This type is plain data; the table is compiled (options parsed, matches
// checked for overlap) by the package that serves it.
type Route struct {
	// Name identifies the entry: what `fence_route` names, what audit
	// events and logs carry. Required, unique.
	Name string `yaml:"name"`
	// Match says which requests the entry governs when no trusted caller
	// names one.
	Match RouteMatch `yaml:"match"`

	// Key is a literal lock key or a template over path segments
	// ("orders/{2:int}"); empty: the key comes from KeyHeader.
	Key         string `yaml:"key"`
	KeyHeader   string `yaml:"keyHeader"`   // default x-fence-key
	FenceHeader string `yaml:"fenceHeader"` // default x-fence-token
	Policy      string `yaml:"policy"`      // holder (default), latest, off
	Mode        string `yaml:"mode"`        // enforce (default), dry-run, warn
	// Methods are the write methods ("POST,PUT", "+PROPFIND" or "*");
	// default every method but GET, HEAD and OPTIONS.
	Methods string `yaml:"methods"`
	// Proof is what a write must carry besides its fence: none (default),
	// lockId or signed.
	Proof string `yaml:"proof"`
	// Barrier turns the write barrier on (only edges that see the response:
	// the proxy and ext_proc); MaxWrite bounds a barrier write (default
	// 30 s); MaxWait bounds how long a newer fence waits for an older write
	// in flight before it is refused `draining`.
	Barrier  bool     `yaml:"barrier"`
	MaxWrite Duration `yaml:"maxWrite"`
	MaxWait  Duration `yaml:"maxWait"`

	// Upstream, when set, makes the fencing reverse proxy serve the entry
	// (http:// or https:// URL); the proxy-only options below apply then.
	Upstream        string   `yaml:"upstream"`
	PreserveHost    bool     `yaml:"preserveHost"`
	Upgrade         bool     `yaml:"upgrade"`
	BodyIdleTimeout Duration `yaml:"bodyIdleTimeout"`
	BodyTimeout     Duration `yaml:"bodyTimeout"`
}

// RouteMatch selects requests, as a Gateway API HTTPRouteMatch does.
type RouteMatch struct {
	// Hosts are exact host names or "*."-wildcards ("*.example.com": one or
	// more labels before example.com); empty: every host. Compared without
	// the port, case-insensitively.
	Hosts []string `yaml:"hosts"`
	// Path is the request path the entry governs; empty: every path.
	Path RoutePath `yaml:"path"`
	// Methods restrict the entry to these request methods; empty: every
	// method (the entry's Methods still say which of them are writes).
	Methods []string `yaml:"methods"`
}

// RoutePath is a path match: Type Exact, PathPrefix (segment-wise: "/orders"
// matches "/orders" and "/orders/…", not "/ordersX") or Template (segments
// of the key template's shape: "/orders/{int}/items/*", where "*" is any one
// segment and {int}/{uuid} a segment of that type).
type RoutePath struct {
	Type  string `yaml:"type"` // Exact | PathPrefix (default) | Template
	Value string `yaml:"value"`
}

// Route path match types (RoutePath.Type; routes.Compile parses them).
const (
	RoutePathExact    = "Exact"
	RoutePathPrefix   = "PathPrefix"
	RoutePathTemplate = "Template"
)

// Unmatched-write settings (Check.UnmatchedWrites).
const (
	UnmatchedDeny     = "deny"
	UnmatchedDefaults = "defaults"
)

// RouteTable is the whole route table: the routes: entries, then each
// proxy.routes entry as an entry of its own (match: its prefix; its
// upstream), named as written or "proxy:<prefix>".
func (c *Config) RouteTable() []Route {
	out := make([]Route, 0, len(c.Routes)+len(c.Proxy.Routes))
	out = append(out, c.Routes...)
	for _, r := range c.Proxy.Routes {
		name := r.Name
		if name == "" {
			name = "proxy:" + r.Prefix
		}
		out = append(out, Route{
			Name: name, Match: RouteMatch{Path: RoutePath{Type: RoutePathPrefix, Value: r.Prefix}},
			Key: r.Key, KeyHeader: r.KeyHeader, FenceHeader: r.FenceHeader, Policy: r.Policy, Mode: r.Mode,
			Methods: r.Methods, Proof: r.Proof, Barrier: r.Barrier, MaxWrite: r.MaxWrite, MaxWait: r.MaxWait,
			Upstream: r.Upstream, PreserveHost: r.PreserveHost, Upgrade: r.Upgrade,
			BodyIdleTimeout: r.BodyIdleTimeout, BodyTimeout: r.BodyTimeout,
		})
	}
	return out
}

// ProxyEntries are the table's entries the fencing reverse proxy serves
// (those with an upstream).
func (c *Config) ProxyEntries() []Route {
	var out []Route
	for _, r := range c.RouteTable() {
		if r.Upstream != "" {
			out = append(out, r)
		}
	}
	return out
}

// routeProblems checks what config owns of the routes: entries (names,
// the upstream's URL, the proxy-only options only with an upstream) and
// check.unmatchedWrites. An entry with an upstream may match as any entry
// does (hosts, path types, methods): the proxy matches with the table's
// own matcher (#27). The options
// (policy, templates, matches' shapes, overlaps) are routes.Compile's to
// check; cmd reports them with these.
func (c *Config) routeProblems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch c.Check.UnmatchedWrites {
	case "", UnmatchedDeny, UnmatchedDefaults:
	default:
		add("check.unmatchedWrites: %q must be deny or defaults", c.Check.UnmatchedWrites)
	}
	seen := map[string]bool{}
	upstreams := false
	for i, r := range c.Routes {
		where := fmt.Sprintf("routes[%d]", i)
		if r.Name != "" {
			where += fmt.Sprintf(" (%s)", r.Name)
		}
		switch {
		case r.Name == "":
			add("%s.name: required (what fence_route names, what audit events carry)", where)
		case seen[r.Name]:
			add("%s.name: %q is used by another entry", where, r.Name)
		}
		seen[r.Name] = true
		if r.MaxWrite < 0 {
			add("%s.maxWrite: must not be negative", where) // maxWait: maxWaitProblems
		}
		if r.MaxWrite > 0 && !r.Barrier {
			add("%s.maxWrite: set without barrier: true", where)
		}
		if r.MaxWrite > 0 && (r.MaxWrite.Std() < time.Millisecond || r.MaxWrite.Std() > lockstore.MaxWriteLimit) {
			add("%s.maxWrite: must be between 1ms and 24h", where)
		}
		if r.Upstream == "" {
			if r.PreserveHost || r.Upgrade || r.BodyIdleTimeout != 0 || r.BodyTimeout != 0 {
				add("%s: preserveHost, upgrade, bodyIdleTimeout and bodyTimeout are the proxy's: set them only with an upstream", where)
			}
			continue
		}
		upstreams = true
		if u, err := url.Parse(r.Upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("%s.upstream: %q must be an http:// or https:// URL with a host", where, r.Upstream)
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
	for i, r := range c.RouteTable() {
		for _, f := range routeText(r) {
			if !Printable(f.value) {
				add("routes[%d] (%s).%s: %q holds a control character, a line or paragraph separator, a byte order mark or invalid UTF-8 (no client sends one in a host, path or method; a generated manifest must not carry one)", i, r.Name, f.name, f.value)
			}
		}
	}
	if upstreams && len(c.Proxy.Routes) > 0 {
		add("routes: entries with an upstream and proxy.routes exclude each other: move proxy.routes into routes:")
	}
	return append(out, c.Proxy.routeProblems()...)
}

// ValidateRoutes checks the route table's part of the configuration (what
// a reload re-reads): routes:, proxy.routes' shape, check.unmatchedWrites
// and the barrier entries' maxWrite against check.maxWriteCap.
func (c *Config) ValidateRoutes() error {
	p := Problems(c.routeProblems())
	p = append(p, c.maxWriteCapProblems()...)
	p = append(p, c.maxWaitProblems()...)
	if len(p) > 0 {
		return p
	}
	return nil
}

// maxRoutesFile bounds the included routes file (the ConfigMap it comes
// from holds at most 1 MiB).
const maxRoutesFile = 1 << 20

// IncludeRoutesFile appends the entries of RoutesFile (when set) to Routes
// and records the content's hash in RoutesFileSum. A missing file is no
// entries (the ConfigMap may not be published yet); a file that does not
// parse, or is too large, is an error.
func (c *Config) IncludeRoutesFile() error {
	if c.RoutesFile == "" {
		return nil
	}
	// Bounded like the config file (ReadFile: a regular file, never a
	// FIFO waited on), then to the smaller cap of an included table.
	b, err := ReadFile(c.RoutesFile)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("routesFile: %w", err)
	}
	if len(b) > maxRoutesFile {
		return fmt.Errorf("routesFile %s: %d bytes, more than %d", c.RoutesFile, len(b), maxRoutesFile)
	}
	sum := sha256.Sum256(b)
	c.RoutesFileSum = hex.EncodeToString(sum[:])
	var f struct {
		Routes []Route `yaml:"routes"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("routesFile %s: %w", c.RoutesFile, err)
	}
	c.Routes = append(c.Routes, f.Routes...)
	return nil
}

// routeField is one of an entry's text fields, named as in the file.
type routeField struct{ name, value string }

// routeText lists every text field of r.
func routeText(r Route) []routeField {
	out := []routeField{{"name", r.Name}, {"match.path.type", r.Match.Path.Type}, {"match.path.value", r.Match.Path.Value},
		{"key", r.Key}, {"keyHeader", r.KeyHeader}, {"fenceHeader", r.FenceHeader}, {"policy", r.Policy}, {"mode", r.Mode},
		{"methods", r.Methods}, {"proof", r.Proof}, {"upstream", r.Upstream}}
	for j, h := range r.Match.Hosts {
		out = append(out, routeField{fmt.Sprintf("match.hosts[%d]", j), h})
	}
	for j, m := range r.Match.Methods {
		out = append(out, routeField{fmt.Sprintf("match.methods[%d]", j), m})
	}
	return out
}

// Printable reports whether s is valid UTF-8 without C0 or C1 control
// characters, DEL, U+2028, U+2029 or a byte order mark: the characters a
// YAML parser may read as a line break, and that no client sends in a
// host, path or method.
func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0x2028 || r == 0x2029 || r == 0xFEFF
	})
}
