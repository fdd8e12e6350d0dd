package backend

import "github.com/fencegate/fencegate/lockstore"

// ValidateSweepLimit checks SweepBarrier's limit before any I/O.
func ValidateSweepLimit(limit int) error {
	if limit <= 0 {
		return lockstore.Errorf(lockstore.InvalidArgument, "sweep", "sweep limit must be positive, got %d", limit)
	}
	return nil
}
