package fenceguard

import "time"

// SetClock replaces k's clock (tests of the pacing).
func SetClock(k *KeySet, now func() time.Time) { k.now = now }
