package lockstore

// Wrappers and optional capabilities.
//
// A wrapper takes one role (Locks, EdgeState, ...) and changes it: the
// telemetry decorator times the lock operations, the API bounds each call,
// the console records what it served. The optional capabilities of the
// store underneath (AuditLog, HeldCounter, LockLister, BarrierSweeper,
// ReplicationReporter, Pinger, Describer) stay reachable through any number
// of wrappers, as net/http's ResponseController finds a ResponseWriter's
// Flusher through middleware: each wrapper has an Unwrap method returning
// what it wraps, and As walks that chain. No wrapper hand-builds variants
// to pass interfaces through, and none can drop one.

// Unwrapper is implemented by every wrapper of a role: Unwrap returns the
// value it wraps (a Store, or the role it was given).
type Unwrapper interface {
	Unwrap() any
}

// maxUnwrap bounds As's walk, so a wrapper that (wrongly) unwraps to
// itself cannot loop forever.
const maxUnwrap = 64

// As finds a T in v's wrapper chain: v itself if it is a T, else the first
// value reached through Unwrap, outermost first. The outermost match wins,
// so a wrapper that implements T itself is found before what it wraps.
//
//	if sw, ok := lockstore.As[lockstore.BarrierSweeper](locks); ok { ... }
func As[T any](v any) (T, bool) {
	for range maxUnwrap {
		if t, ok := v.(T); ok {
			return t, true
		}
		u, ok := v.(Unwrapper)
		if !ok {
			break
		}
		v = u.Unwrap()
	}
	var zero T
	return zero, false
}
