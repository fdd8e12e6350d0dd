package proxy

import (
	"errors"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
)

// DefaultMaxWait is a barrier route's MaxWait when unset: how long a write
// under a current fence waits at the barrier for older writes of its key to
// finish. Long enough for a typical API write (the older holder's writes in
// flight at a handover), since the proxy holds the client's connection
// anyway; a write that finishes here wakes its key's waiters at once.
// Every route's MaxWait is bounded by the gateway's check.maxWaitCap.
const DefaultMaxWait = 5 * time.Second

// effectiveMaxWait is a barrier route's MaxWait with its default (0
// without the barrier, where nothing waits).
func (r Route) effectiveMaxWait() time.Duration {
	switch {
	case !r.Barrier:
		return 0
	case r.MaxWait <= 0:
		return DefaultMaxWait
	}
	return r.MaxWait
}

// validateMaxWait: MaxWait is positive when set, and only on a barrier
// route (it means nothing elsewhere, and a route that sets it believes
// otherwise).
func (r Route) validateMaxWait() error {
	switch {
	case r.MaxWait < 0:
		return errors.New("maxWait must not be negative")
	case r.MaxWait > 0 && !r.Barrier:
		return errors.New("maxWait is set without the barrier")
	}
	return nil
}

// admittedAt is when the exchange of a barrier write d admitted may start
// counting its MaxWrite: the start of the store call that admitted it, or
// start (the request's arrival, earlier) if the Decision does not say.
func admittedAt(d fencecheck.Decision, start time.Time) time.Time {
	if d.Admitted.IsZero() || d.Admitted.Before(start) {
		return start
	}
	return d.Admitted
}
