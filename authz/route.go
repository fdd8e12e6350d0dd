package authz

import (
	"sync"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
)

// routeOptionNames lists every route option, for transports that look each
// one up by name.
var routeOptionNames = []string{fencewire.ExtKey, fencewire.ExtHeader, fencewire.ExtPolicy, fencewire.ExtMode, fencewire.ExtMethods, fencewire.ExtRoute, fencewire.ExtBarrier, fencewire.ExtMaxWrite, fencewire.ExtProof, fencewire.ExtMaxWait}

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
		key:     m[fencewire.ExtKey],
		header:  m[fencewire.ExtHeader],
		policy:  m[fencewire.ExtPolicy],
		mode:    m[fencewire.ExtMode],
		methods: m[fencewire.ExtMethods],
		name:    m[fencewire.ExtRoute],

		barrier:  m[fencewire.ExtBarrier],
		maxWrite: m[fencewire.ExtMaxWrite],
		maxWait:  m[fencewire.ExtMaxWait],
		proof:    m[fencewire.ExtProof],
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
