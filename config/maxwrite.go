package config

import (
	"fmt"
	"time"
)

// DefaultMaxWriteCap is check.maxWriteCap when unset
// (fencecheck.DefaultMaxWriteCap): the longest one dropped barrier write
// can hold back a key's next holder.
const DefaultMaxWriteCap = 5 * time.Minute

// maxWriteCapLimit is the largest cap (lockstore.MaxWriteLimit).
const maxWriteCapLimit = 24 * time.Hour

// EffectiveMaxWriteCap is check.maxWriteCap, or its default.
func (c Check) EffectiveMaxWriteCap() time.Duration {
	if c.MaxWriteCap > 0 {
		return c.MaxWriteCap.Std()
	}
	return DefaultMaxWriteCap
}

// maxWriteCapProblems checks check.maxWriteCap and that every proxy
// barrier route's maxWrite (or its default) is within it: the operator's
// own routes are refused at load, never clamped, since a shorter maxWrite
// would silently weaken what the route asked for.
func (c *Config) maxWriteCapProblems() []string {
	var out []string
	if c.Check.MaxWriteCap < 0 || (c.Check.MaxWriteCap > 0 && (c.Check.MaxWriteCap.Std() < time.Millisecond || c.Check.MaxWriteCap.Std() > maxWriteCapLimit)) {
		return append(out, "check.maxWriteCap: must be between 1ms and 24h")
	}
	limit := c.Check.EffectiveMaxWriteCap()
	for i, r := range c.RouteTable() {
		if !r.Barrier {
			continue
		}
		mw, src := r.MaxWrite.Std(), ""
		if mw <= 0 {
			mw, src = DefaultProxyMaxWrite, " (the default)"
		}
		if mw > limit {
			where := c.tableWhere(i)
			out = append(out, fmt.Sprintf("%s.maxWrite: %s%s is above check.maxWriteCap %s; lower it, or raise the cap", where, mw, src, limit))
		}
	}
	return out
}
