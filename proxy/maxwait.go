package proxy

import (
	"errors"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
)

// effectiveMaxWait is a barrier route's MaxWait with its default
// (fencecheck.DefaultMaxWait; 0 without the barrier, where nothing waits).
func (r Route) effectiveMaxWait() time.Duration {
	switch {
	case !r.Barrier:
		return 0
	case r.MaxWait <= 0:
		return fencecheck.DefaultMaxWait
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
