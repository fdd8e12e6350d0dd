package authz

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lockstore"
)

// parseMaxWait reads fence_max_wait: empty leaves the default (0: the
// checker's check.timeout — Envoy gives a whole ext_proc stream message one
// message_timeout, 200 ms by default, and a wait past it only makes Envoy
// answer instead of us); otherwise a Go duration in [1ms, 24h], and only
// on a route with the barrier on. The gateway's check.maxWaitCap bounds it
// further (fencecheck: above it the route's writes fail closed).
func parseMaxWait(s string, barrier bool) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Millisecond || d > lockstore.MaxWriteLimit {
		return 0, fmt.Errorf("authz: %s %q is not a duration between 1ms and %s", fencewire.ExtMaxWait, s, lockstore.MaxWriteLimit)
	}
	if !barrier {
		return 0, fmt.Errorf("authz: %s is set without %s on", fencewire.ExtMaxWait, fencewire.ExtBarrier)
	}
	return d, nil
}
