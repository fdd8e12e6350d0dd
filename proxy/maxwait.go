package proxy

import (
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

// admittedAt is when the exchange of a barrier write d admitted may start
// counting its MaxWrite: the start of the store call that admitted it, or
// start (the request's arrival, earlier) if the Decision does not say.
func admittedAt(d fencecheck.Decision, start time.Time) time.Time {
	if d.Admitted.IsZero() || d.Admitted.Before(start) {
		return start
	}
	return d.Admitted
}
