package config

import (
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
)

// EffectiveMaxWriteCap is check.maxWriteCap, or its default
// (fencecheck.DefaultMaxWriteCap: the longest one dropped barrier write can
// hold back a key's next holder). The largest cap is lockstore.MaxWriteLimit.
func (c Check) EffectiveMaxWriteCap() time.Duration {
	if c.MaxWriteCap > 0 {
		return c.MaxWriteCap.Std()
	}
	return fencecheck.DefaultMaxWriteCap
}

// maxWriteCapProblems checks check.maxWriteCap and that every proxy
// barrier route's maxWrite (or its default) is within it: the operator's
// own routes are refused at load, never clamped, since a shorter maxWrite
// would silently weaken what the route asked for.
func (c *Config) maxWriteCapProblems() []string {
	var out []string
	if c.Check.MaxWriteCap < 0 || (c.Check.MaxWriteCap > 0 && (c.Check.MaxWriteCap.Std() < time.Millisecond || c.Check.MaxWriteCap.Std() > lockstore.MaxWriteLimit)) {
		return append(out, "check.maxWriteCap: must be between 1ms and 24h")
	}
	limit := c.Check.EffectiveMaxWriteCap()
	for i, r := range c.RouteTable() {
		if !r.Barrier {
			continue
		}
		mw, src := r.MaxWrite.Std(), ""
		if mw <= 0 {
			mw, src = fencecheck.DefaultMaxWrite, " (the default)"
		}
		if mw > limit {
			where := c.tableWhere(i)
			out = append(out, fmt.Sprintf("%s.maxWrite: %s%s is above check.maxWriteCap %s; lower it, or raise the cap", where, mw, src, limit))
		}
	}
	return out
}
