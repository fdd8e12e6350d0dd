package config

// Route is one entry of the route table (the top-level `routes:` list), shared
// by every edge: Envoy ext_authz and ext_proc, forward-auth, `fencegate proxy`
// and the proxy listener of `fencegate serve`. A request is governed by the
// entry its trusted caller names (`fence_route`), else by the entry its host,
// path and method match (precedence as in the Gateway API). An entry with an
// Upstream is also served by the fencing reverse proxy.
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
