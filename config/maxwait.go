package config

import (
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
)

// maxBarrierWaiters bounds check.barrierMaxWaiters: every waiter is a held
// connection and a few store calls a second.
const maxBarrierWaiters = 65536

// EffectiveMaxWaitCap is check.maxWaitCap, or its default
// (fencecheck.DefaultMaxWaitCap: the longest any route may hold a client's
// connection at the barrier).
func (c Check) EffectiveMaxWaitCap() time.Duration {
	if c.MaxWaitCap > 0 {
		return c.MaxWaitCap.Std()
	}
	return fencecheck.DefaultMaxWaitCap
}

// EffectiveMaxWait is a barrier entry's maxWait with its default: on the
// proxy (an entry with an upstream) fencecheck.DefaultMaxWait, since the
// proxy holds the client's connection anyway; on ext_proc 0, the check's
// timeout (Envoy's message timeout bounds the wait). 0 without the barrier.
func (r Route) EffectiveMaxWait() time.Duration {
	switch {
	case !r.Barrier:
		return 0
	case r.MaxWait > 0:
		return r.MaxWait.Std()
	case r.Upstream != "":
		return fencecheck.DefaultMaxWait
	}
	return 0
}

// maxWaitProblems checks check.maxWaitCap, check.barrierMaxWaiters and every
// table entry's (and proxy route's) maxWait: only on a barrier route, in [1ms, 24h], and (its
// default too) within the cap. Refused at load, never clamped, as maxWrite.
func (c *Config) maxWaitProblems() []string {
	var out []string
	if c.Check.MaxWaitCap < 0 || (c.Check.MaxWaitCap > 0 && (c.Check.MaxWaitCap.Std() < time.Millisecond || c.Check.MaxWaitCap.Std() > lockstore.MaxWriteLimit)) {
		return append(out, "check.maxWaitCap: must be between 1ms and 24h")
	}
	if c.Check.BarrierMaxWaiters < 0 || c.Check.BarrierMaxWaiters > maxBarrierWaiters {
		out = append(out, fmt.Sprintf("check.barrierMaxWaiters: must be between 1 and %d (0: the default, %d)", maxBarrierWaiters, fencecheck.DefaultBarrierMaxWaiters))
	}
	limit := c.Check.EffectiveMaxWaitCap()
	for i, r := range c.RouteTable() {
		where := c.tableWhere(i)
		switch mw := r.MaxWait.Std(); {
		case mw < 0 || (mw > 0 && (mw < time.Millisecond || mw > lockstore.MaxWriteLimit)):
			out = append(out, where+".maxWait: must be between 1ms and 24h")
		case mw > 0 && !r.Barrier:
			out = append(out, where+".maxWait: set without barrier: true")
		case r.EffectiveMaxWait() > limit:
			src := ""
			if mw == 0 {
				src = " (the default)"
			}
			out = append(out, fmt.Sprintf("%s.maxWait: %s%s is above check.maxWaitCap %s; lower it, or raise the cap", where, r.EffectiveMaxWait(), src, limit))
		}
	}
	return out
}

// tableWhere names entry i of RouteTable as the configuration writes it:
// "routes[i] (name)" or "proxy.routes[j] (name)".
func (c *Config) tableWhere(i int) string {
	where, name := fmt.Sprintf("routes[%d]", i), ""
	if i < len(c.Routes) {
		name = c.Routes[i].Name
	} else {
		where, name = fmt.Sprintf("proxy.routes[%d]", i-len(c.Routes)), c.Proxy.Routes[i-len(c.Routes)].Name
	}
	if name != "" {
		where += fmt.Sprintf(" (%s)", name)
	}
	return where
}
