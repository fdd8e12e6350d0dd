package lockstore

import "time"

// TimeToleranceMs is the fixed clock tolerance of the liveness predicate
// (docs/design.md, "Constants and liveness"). It is not configurable: every backend must agree on liveness.
const TimeToleranceMs = 1000

// DefaultTTL is the lock TTL when a caller gives none.
const DefaultTTL = 30 * time.Second

// ValidateTTL checks that ttl is a positive whole number of milliseconds and
// returns it in milliseconds.
func ValidateTTL(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, BadInputf("ttl must be positive, got %s", ttl)
	}
	if ttl%time.Millisecond != 0 {
		return 0, BadInputf("ttl must be a whole number of milliseconds, got %s", ttl)
	}
	return ttl.Milliseconds(), nil
}
