package config

import (
	"fmt"
	"time"
)

// Defaults of the barrier's wait.
const (
	// DefaultProxyMaxWait is a proxy barrier route's maxWait when unset
	// (proxy.DefaultMaxWait): long enough for a typical API write, since
	// the proxy holds the client's connection anyway.
	DefaultProxyMaxWait = 5 * time.Second
	// DefaultMaxWaitCap is check.maxWaitCap when unset
	// (fencecheck.DefaultMaxWaitCap): the longest any route may hold a
	// client's connection at the barrier.
	DefaultMaxWaitCap = 30 * time.Second
	// maxBarrierWaiters bounds check.barrierMaxWaiters: every waiter is a
	// held connection and a few store calls a second.
	maxBarrierWaiters = 65536
)

// EffectiveMaxWaitCap is check.maxWaitCap, or its default.
func (c Check) EffectiveMaxWaitCap() time.Duration {
	if c.MaxWaitCap > 0 {
		return c.MaxWaitCap.Std()
	}
	return DefaultMaxWaitCap
}

// EffectiveMaxWait is the route's maxWait, or its default.
func (r ProxyRoute) EffectiveMaxWait() time.Duration {
	if r.MaxWait > 0 {
		return r.MaxWait.Std()
	}
	return DefaultProxyMaxWait
}

// maxWaitProblems checks check.maxWaitCap, check.barrierMaxWaiters and every
// proxy route's maxWait: only on a barrier route, in [1ms, 24h], and (its
// default too) within the cap. Refused at load, never clamped, as maxWrite.
func (c *Config) maxWaitProblems() []string {
	var out []string
	if c.Check.MaxWaitCap < 0 || (c.Check.MaxWaitCap > 0 && (c.Check.MaxWaitCap.Std() < time.Millisecond || c.Check.MaxWaitCap.Std() > maxWriteCapLimit)) {
		return append(out, "check.maxWaitCap: must be between 1ms and 24h")
	}
	if c.Check.BarrierMaxWaiters < 0 || c.Check.BarrierMaxWaiters > maxBarrierWaiters {
		out = append(out, fmt.Sprintf("check.barrierMaxWaiters: must be between 1 and %d (0: the default, 256)", maxBarrierWaiters))
	}
	limit := c.Check.EffectiveMaxWaitCap()
	for i, r := range c.Proxy.Routes {
		where := fmt.Sprintf("proxy.routes[%d]", i)
		if r.Name != "" {
			where += fmt.Sprintf(" (%s)", r.Name)
		}
		switch mw := r.MaxWait.Std(); {
		case mw < 0 || (mw > 0 && (mw < time.Millisecond || mw > maxWriteCapLimit)):
			out = append(out, where+".maxWait: must be between 1ms and 24h")
		case mw > 0 && !r.Barrier:
			out = append(out, where+".maxWait: set without barrier: true")
		case r.Barrier && r.EffectiveMaxWait() > limit:
			src := ""
			if mw == 0 {
				src = " (the default)"
			}
			out = append(out, fmt.Sprintf("%s.maxWait: %s%s is above check.maxWaitCap %s; lower it, or raise the cap", where, r.EffectiveMaxWait(), src, limit))
		}
	}
	return out
}
