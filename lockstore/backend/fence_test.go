package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

func TestIsLive(t *testing.T) {
	const now = 1_700_000_000_000
	tests := []struct {
		exp  int64
		want bool
	}{
		{now + 30_000, true},
		{now, true},
		{now - 999, true},   // inside the 1000 ms tolerance
		{now - 1000, false}, // exactly at the tolerance: expired
		{now - 1001, false},
		{0, false},
	}
	for _, tt := range tests {
		if got := IsLive(tt.exp, now); got != tt.want {
			t.Errorf("IsLive(now%+d) = %v, want %v", tt.exp-now, got, tt.want)
		}
	}
}

// TestNextFenceAt: without the floor, the counter's successor up to and
// including FenceMax; with it, the larger of that and the clock floor, never
// more than FloorLeadMax ahead of the floor; past FenceMax, FenceOverflow
// (Internal), ahead of the floor, FenceClockBehind (ServiceUnavailable), each
// naming the key only by its hash.
func TestNextFenceAt(t *testing.T) {
	now := FloorEpochMs + 60_000_000_000 // about 694 days after the epoch
	fl := FenceFloorAt(now)
	if fl != 6_000_000_000_000 {
		t.Fatalf("FenceFloorAt(epoch+6e10 ms) = %d, want 6e12", fl)
	}
	for _, tt := range []struct {
		name  string
		last  int64
		now   int64
		floor FenceFloor
		want  int64
		code  lockstore.Code // "" when a fence is issued
	}{
		{"off: counter+1", 41, now, FloorOff, 42, ""},
		{"off: the last fence", lockstore.FenceMax - 1, now, FloorOff, lockstore.FenceMax, ""},
		{"off: overflow", lockstore.FenceMax, now, FloorOff, 0, lockstore.Internal},
		{"clock: an old counter jumps to the floor", 41, now, FloorClock, fl, ""},
		{"clock: a fresh counter starts at the floor", 0, now, FloorClock, fl, ""},
		{"clock: at the floor, one more", fl, now, FloorClock, fl + 1, ""},
		{"clock: ahead within the cap", fl + FloorLeadMax - 1, now, FloorClock, fl + FloorLeadMax, ""},
		{"clock: one past the cap", fl + FloorLeadMax, now, FloorClock, 0, lockstore.ServiceUnavailable},
		{"clock: far ahead (a clock that stepped back)", fl + 10*FloorLeadMax, now, FloorClock, 0, lockstore.ServiceUnavailable},
		{"clock: before the epoch the floor is 0", 41, FloorEpochMs - 5, FloorClock, 42, ""},
		{"clock: overflow first", lockstore.FenceMax, now, FloorClock, 0, lockstore.Internal},
		{"clock: a floor past FenceMax", 41, FloorEpochMs + lockstore.FenceMax/FloorPerMs + 1, FloorClock, 0, lockstore.Internal},
	} {
		const key = "tenant/secret"
		n, f, err := NextFenceAt("acquire", key, tt.last, tt.now, tt.floor)
		if tt.code == "" {
			if err != nil || n != tt.want || f != fmt.Sprintf("%015d", tt.want) {
				t.Errorf("%s: NextFenceAt(%d) = %d, %q, %v; want %d", tt.name, tt.last, n, f, err, tt.want)
			}
			continue
		}
		var le *lockstore.Error
		if !errors.As(err, &le) || le.Code != tt.code || le.Op != "acquire" || le.Key != key {
			t.Errorf("%s: NextFenceAt(%d) = %d, %v; want a %s error for the key", tt.name, tt.last, n, err, tt.code)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, key) || !strings.Contains(msg, lockstore.HashKey(key)) {
			t.Errorf("%s: error %q: want the key hash, not the key", tt.name, msg)
		}
	}
}

// TestFenceFloorFitsForDecades: the floor stays below FenceWarn until 2053
// and below FenceMax for centuries, and is exact in a Lua double.
func TestFenceFloorFitsForDecades(t *testing.T) {
	at := func(y int) int64 { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() }
	if f := FenceFloorAt(at(2053)); f >= lockstore.FenceWarn {
		t.Errorf("floor on 2053-01-01 = %d, past FenceWarn", f)
	}
	if f := FenceFloorAt(at(2054)); f <= lockstore.FenceWarn {
		t.Errorf("floor on 2054-01-01 = %d; the warning level was meant to be reached in 2053", f)
	}
	if f := FenceFloorAt(at(2300)); f >= lockstore.FenceMax || f >= 1<<53 {
		t.Errorf("floor on 2300-01-01 = %d, past FenceMax or 2^53", f)
	}
}

// TestNoteFence: one warning, at Warn, only past FenceWarn, with the key's
// hash under "keyHash" and never the raw key: the same on every backend.
func TestNoteFence(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	const key = "tenant/secret"
	NoteFence(context.Background(), log, key, lockstore.FenceWarn)
	if buf.Len() != 0 {
		t.Fatalf("warning at exactly FenceWarn: %s", buf.String())
	}
	NoteFence(context.Background(), log, key, lockstore.FenceWarn+1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want one JSON record, got %q: %v", buf.String(), err)
	}
	if rec["level"] != "WARN" || rec["keyHash"] != lockstore.HashKey(key) || rec["fence"] != "090000000000001" {
		t.Fatalf("warning = %v; want level WARN, keyHash and the 15-digit fence", rec)
	}
	if strings.Contains(buf.String(), key) {
		t.Fatalf("warning leaks the raw key: %s", buf.String())
	}
}
