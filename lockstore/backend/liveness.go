package backend

import "github.com/fencegate/fencegate/lockstore"

// IsLive is the single liveness predicate every backend uses: a lock whose
// stored expiry is expiresAtMs is live at nowMs (the backend's time
// authority) while expiresAtMs > nowMs - TimeToleranceMs.
func IsLive(expiresAtMs, nowMs int64) bool {
	return expiresAtMs > nowMs-lockstore.TimeToleranceMs
}
