package authz

import (
	"sync"

	"github.com/fencegate/fencegate/fencecheck"
)

// Default request headers (lowercase, as Envoy hands them over).
const (
	HeaderKey      = fencecheck.HeaderKey      // the lock key, unless the route names it
	HeaderToken    = fencecheck.HeaderToken    // the presented fence, unless the route names another header
	HeaderLockID   = fencecheck.HeaderLockID   // the optional ownership proof; never reaches upstream
	HeaderProof    = fencecheck.HeaderProof    // a signed write proof (package writeproof); reaches upstream, which may verify it too
	HeaderVerified = fencecheck.HeaderVerified // set towards upstream: the fence that was verified

	HeaderReason     = fencecheck.HeaderReason     // denials: the reason
	HeaderDecisionID = fencecheck.HeaderDecisionID // every checked write: the decision id
	HeaderWouldDeny  = fencecheck.HeaderWouldDeny  // towards upstream in dry-run: the reason enforce would have denied
)

// Route option names: Envoy context_extensions keys, and the query
// parameters of the HTTP forward-auth endpoint.
const (
	ExtKey     = "fence_key"     // a literal key, or a template over path segments: "orders/{2:int}" (fencecheck.ParseKeyTemplate)
	ExtHeader  = "fence_header"  // the header carrying the fence (default x-fence-token)
	ExtPolicy  = "fence_policy"  // holder | latest | off
	ExtMode    = "fence_mode"    // enforce | dry-run | warn
	ExtMethods = "fence_methods" // write methods: "POST,PUT", "+PROPFIND" (custom) or "*"; default everything but GET, HEAD, OPTIONS
	ExtRoute   = "fence_route"   // from a trusted caller, names a route table entry; else the route's name, for audit and logs
	// ExtBarrier asks for the write barrier: "on" or "off". Only ext_proc
	// can keep it; on ext_authz and forward-auth a route asking for it is
	// misconfigured, and its writes fail closed (503 unavailable).
	ExtBarrier = "fence_barrier"
	// ExtMaxWrite is the barrier's maxWrite ("30s"; default
	// fencecheck.DefaultMaxWrite).
	ExtMaxWrite = "fence_max_write"
	ExtProof    = "fence_proof" // none | lockId | signed: what a write must carry besides its fence (fencecheck.ProofMode)
	// ExtMaxWait is the barrier's maxWait ("2s"; default check.timeout,
	// what one Envoy ext_proc message timeout affords): how long a newer
	// fence waits for an older write in flight before it is refused
	// draining. Only with fence_barrier on.
	ExtMaxWait = "fence_max_wait"
)

// routeOptionNames lists every route option, for transports that look each
// one up by name.
var routeOptionNames = []string{ExtKey, ExtHeader, ExtPolicy, ExtMode, ExtMethods, ExtRoute, ExtBarrier, ExtMaxWrite, ExtProof, ExtMaxWait}

// routeOptions are a route's settings, from context_extensions (gRPC) or
// headers/query (HTTP). Empty fields take the defaults.
type routeOptions struct {
	key, header, policy, mode, methods, name string
	barrier, maxWrite, maxWait               string
	proof                                    string
	// err, when set, says the route's options cannot be known (writes fail
	// closed, like options that do not parse).
	err error
}

func optionsFromMap(m map[string]string) routeOptions {
	return routeOptions{
		key:     m[ExtKey],
		header:  m[ExtHeader],
		policy:  m[ExtPolicy],
		mode:    m[ExtMode],
		methods: m[ExtMethods],
		name:    m[ExtRoute],

		barrier:  m[ExtBarrier],
		maxWrite: m[ExtMaxWrite],
		maxWait:  m[ExtMaxWait],
		proof:    m[ExtProof],
	}
}

// inline reports whether the caller sent any route option besides the
// route's name.
func (ro routeOptions) inline() bool {
	return ro.key != "" || ro.header != "" || ro.policy != "" || ro.mode != "" || ro.methods != "" ||
		ro.barrier != "" || ro.maxWrite != "" || ro.maxWait != "" || ro.proof != ""
}

// compile compiles a caller's options. Options that do not parse give a
// route whose writes fail closed (503 unavailable; a key template that
// does not parse, 400 malformed), as they always have.
func (ro routeOptions) compile() *fencecheck.Route {
	barrier, maxWrite, berr := parseBarrier(ro.barrier, ro.maxWrite)
	maxWait, werr := parseMaxWait(ro.maxWait, barrier)
	if berr == nil {
		berr = werr
	}
	rt, err := fencecheck.CompileRoute(fencecheck.RouteSpec{
		Name: ro.name, Key: ro.key, FenceHeader: ro.header, Policy: ro.policy, Mode: ro.mode, Methods: ro.methods,
		Proof: ro.proof, Barrier: barrier, MaxWrite: maxWrite, MaxWait: maxWait,
	})
	_ = err // carried by rt: its writes fail closed
	if berr != nil {
		rt = rt.Failed(berr)
	}
	if ro.err != nil {
		rt = rt.Failed(ro.err)
	}
	return rt
}

// routeCacheSize bounds the compiled caller options a transport keeps: a
// deployment has a few dozen routes; a caller sending a new set of
// options on every request costs one compilation each, never memory.
const routeCacheSize = 256

// routeCache keeps callers' options compiled (#21): keyed by the options'
// values, at most max entries; when full, an arbitrary entry makes room.
type routeCache struct {
	mu  sync.RWMutex
	m   map[routeOptions]*fencecheck.Route
	max int
}

func newRouteCache(max int) *routeCache {
	return &routeCache{m: make(map[routeOptions]*fencecheck.Route, max), max: max}
}

// get returns ro compiled, from the cache when it is there.
func (c *routeCache) get(ro routeOptions) *fencecheck.Route {
	if ro.err != nil {
		return ro.compile() // not cached: errors do not compare by value
	}
	c.mu.RLock()
	rt := c.m[ro]
	c.mu.RUnlock()
	if rt != nil {
		return rt
	}
	rt = ro.compile()
	c.mu.Lock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[ro] = rt
	c.mu.Unlock()
	return rt
}

// len is how many compiled options the cache holds.
func (c *routeCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
