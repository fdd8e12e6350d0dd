package backend

import (
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/lockstore"
)

// The clock floor keeps a key's fences growing when its store loses writes
// it had acknowledged: a failover to a replica that lagged, a Redis restart
// without persistence, a bolt file or database restored from a backup. The
// counter then reverts to an older value, and counter+1 would hand out again
// a fence some holder already has. With the floor, every acquire issues
//
//	fence = max(counter+1, FenceFloorAt(now))
//
// and writes that fence back to the counter, in the same atomic step as the
// increment it replaces, with now read from the store's own clock in that
// step (Redis TIME in the script, PostgreSQL clock_timestamp() after the
// key's advisory lock, the gateway's clock in a bolt or Firestore
// transaction: each backend's time authority). An acquire whose fence would
// lead the floor by more than FloorLeadMax writes nothing and fails (see
// FenceClockBehind), so every fence ever issued is at most
// FenceFloorAt(t)+FloorLeadMax for the store time t it was issued at.
//
// The guarantee that follows: after a loss, the next fence is above every
// lost one provided the store time that passed between the last lost acquire
// and the next acquire (by the new primary's clock) exceeds the lead that
// key had, at most FloorLeadMax/FloorPerMs = 1 s. In practice a key's lead is
// 0 (it grows only with more than FloorPerMs acquires of one key within one
// millisecond), so the condition is a clock that did not step back, across
// the failover, by more than the failover took. docs/fences.md states it
// for each store and deployment; lockstore/fencemodel checks it with Spin.
const (
	// FloorEpochMs is the floor's zero: 2025-01-01T00:00:00Z in Unix ms.
	FloorEpochMs int64 = 1_735_689_600_000
	// FloorPerMs is how far the floor rises per millisecond of store time.
	// 100 keeps it in 15 digits for centuries and below FenceWarn until
	// 2053 (at 1000 it would pass FenceWarn in 2027), while no key is
	// acquired 100 times in a millisecond.
	FloorPerMs int64 = 100
	// FloorLeadMax bounds how far a key's counter may be ahead of the floor
	// after an acquire: one TimeToleranceMs of floor, the clock disagreement
	// the lock contract already tolerates between clients sharing a store.
	FloorLeadMax int64 = lockstore.TimeToleranceMs * FloorPerMs
)

// FenceFloorAt is the clock floor at store time nowMs (Unix milliseconds):
// (nowMs-FloorEpochMs)*FloorPerMs, or 0 before the epoch.
func FenceFloorAt(nowMs int64) int64 {
	if nowMs <= FloorEpochMs {
		return 0
	}
	return (nowMs - FloorEpochMs) * FloorPerMs
}

// FenceFloor selects how a store picks the next fence. Its zero value,
// FloorClock, is the default on every backend.
type FenceFloor uint8

const (
	// FloorClock issues max(counter+1, FenceFloorAt(now)): fences skip
	// ahead with the store's clock, and never repeat when the store loses
	// writes (within the assumption stated on FloorLeadMax).
	FloorClock FenceFloor = iota
	// FloorOff issues counter+1: consecutive small fences, as SyncGuard
	// does, and a store that loses acknowledged writes can reissue a fence.
	FloorOff
)

// FenceFloorParam is the store URL parameter every backend takes:
// fenceFloor=clock (the default) or fenceFloor=off.
const FenceFloorParam = "fenceFloor"

func (f FenceFloor) String() string {
	switch f {
	case FloorClock:
		return "clock"
	case FloorOff:
		return "off"
	}
	return fmt.Sprintf("FenceFloor(%d)", uint8(f))
}

// ParseFenceFloor parses a fenceFloor parameter: "clock" or "off".
func ParseFenceFloor(s string) (FenceFloor, error) {
	switch strings.ToLower(s) {
	case "clock":
		return FloorClock, nil
	case "off":
		return FloorOff, nil
	}
	return 0, lockstore.Errorf(lockstore.InvalidArgument, "config", "%s=%q: want clock (the default) or off", FenceFloorParam, s)
}

// NextFenceAt is the fence an acquire of key issues after a counter at last,
// at store time nowMs, under floor: FenceOverflow once last has reached
// FenceMax (or the floor has passed it), FenceClockBehind when the fence
// would lead the floor by more than FloorLeadMax. Backends whose atomic
// step is Go code (bolt, Firestore) call it inside their transaction; the
// Redis script and the PostgreSQL statement compute the same thing, and the
// conformance suite holds all of them to it.
func NextFenceAt(op, key string, last, nowMs int64, floor FenceFloor) (int64, string, error) {
	if last >= lockstore.FenceMax {
		return 0, "", FenceOverflow(op, key)
	}
	next := last + 1
	if floor == FloorClock {
		fl := FenceFloorAt(nowMs)
		if next-fl > FloorLeadMax {
			return 0, "", FenceClockBehind(op, key, next-fl)
		}
		if fl > lockstore.FenceMax {
			return 0, "", FenceOverflow(op, key)
		}
		next = max(next, fl)
	}
	f, err := lockstore.FormatFence(next)
	if err != nil {
		return 0, "", err
	}
	return next, f, nil
}

// FenceClockBehind is the error of an acquire whose fence would lead the
// clock floor by lead (> FloorLeadMax): the store's clock is behind the
// key's counter (it stepped back, or a failover promoted a server whose
// clock is behind the old one's). ServiceUnavailable, because it passes
// when the clock catches up; nothing was written.
func FenceClockBehind(op, key string, lead int64) *lockstore.Error {
	return &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: op, Key: key,
		Msg: fmt.Sprintf("this key's fence counter is %d ms ahead of the store clock's floor, more than the %d ms allowed (the clock stepped back, or a failover promoted a server whose clock is behind); nothing was written, and acquires of this key succeed again once the clock catches up",
			(lead+FloorPerMs-1)/FloorPerMs, FloorLeadMax/FloorPerMs)}
}
