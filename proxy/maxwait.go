package proxy

import (
	"time"

	"github.com/fencegate/fencegate/fencecheck"
)

// admittedAt is when the exchange of a barrier write d admitted may start
// counting its MaxWrite: the start of the store call that admitted it, or
// start (the request's arrival, earlier) if the Decision does not say.
func admittedAt(d fencecheck.Decision, start time.Time) time.Time {
	if d.Admitted.IsZero() || d.Admitted.Before(start) {
		return start
	}
	return d.Admitted
}
