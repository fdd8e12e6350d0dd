package backend

import "github.com/fencegate/fencegate/lockstore"

// ListLimit applies the listing bounds to a requested limit.
func ListLimit(limit int) int {
	if limit <= 0 {
		return lockstore.DefaultListLimit
	}
	return min(limit, lockstore.MaxListLimit)
}
