package lockstore

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
)

// TestFormatFenceDigits: every digit position is written, against the
// %015d formatting the fence's spelling is defined by.
func TestFormatFenceDigits(t *testing.T) {
	for n := int64(1); n <= FenceMax; n = n*7 + 3 {
		got, err := FormatFence(n)
		if want := fmt.Sprintf("%015d", n); err != nil || got != want {
			t.Errorf("FormatFence(%d) = %q, %v; want %q", n, got, err, want)
		}
	}
}

func TestFormatFence(t *testing.T) {
	tests := []struct {
		n    int64
		want string
		err  bool
	}{
		{0, "", true},
		{-1, "", true},
		{1, "000000000000001", false},
		{42, "000000000000042", false},
		{FenceWarn, "090000000000000", false},
		{FenceMax, "900000000000000", false},
		{FenceMax + 1, "", true},
		{1<<63 - 1, "", true},
	}
	for _, tt := range tests {
		got, err := FormatFence(tt.n)
		if tt.err {
			// Overflow is Internal: nothing the caller sent was wrong.
			if CodeOf(err) != Internal {
				t.Errorf("FormatFence(%d) = %q, %v; want an Internal error", tt.n, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("FormatFence(%d) = %q, %v; want %q", tt.n, got, err, tt.want)
		}
		if back, err := ParseFence(got); err != nil || back != tt.n {
			t.Errorf("ParseFence(FormatFence(%d)) = %d, %v", tt.n, back, err)
		}
	}
}

func TestFormatFenceOrdersAsStrings(t *testing.T) {
	prev := ""
	for _, n := range []int64{1, 9, 10, 99, 100, 123456789, FenceWarn, FenceWarn + 1, FenceMax - 1, FenceMax} {
		f, err := FormatFence(n)
		if err != nil {
			t.Fatal(err)
		}
		if f <= prev {
			t.Errorf("%q does not sort after %q", f, prev)
		}
		prev = f
	}
}

func TestParseFence(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"000000000000001", 1, true},
		{"900000000000000", FenceMax, true},
		// Format-valid but never issued; the format check is all parsing does.
		{"000000000000000", 0, true},
		{"999999999999999", 999999999999999, true},
		{"00000000000001", 0, false},   // 14 digits
		{"0000000000000001", 0, false}, // 16 digits
		{"1", 0, false},
		{"", 0, false},
		{"+00000000000001", 0, false},
		{"-00000000000001", 0, false},
		{" 00000000000001", 0, false},
		{"00000000000001 ", 0, false},
		{"0000000000000x1", 0, false},
		{"00000000000001\u0661", 0, false}, // Arabic-Indic digit one
		{"0x0000000000001", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseFence(tt.in)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("ParseFence(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && CodeOf(err) != InvalidArgument {
			t.Errorf("ParseFence(%q) code %s, want InvalidArgument", tt.in, CodeOf(err))
		}
		if ValidFence(tt.in) != tt.ok {
			t.Errorf("ValidFence(%q) = %v", tt.in, !tt.ok)
		}
	}
}

func TestFenceNeedsWarning(t *testing.T) {
	if FenceNeedsWarning(FenceWarn) || !FenceNeedsWarning(FenceWarn+1) {
		t.Error("warning threshold is not 'strictly above FenceWarn'")
	}
}

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

func TestValidateTTL(t *testing.T) {
	tests := []struct {
		ttl  time.Duration
		want int64
		ok   bool
	}{
		{time.Millisecond, 1, true},
		{DefaultTTL, 30_000, true},
		{90 * time.Minute, 5_400_000, true},
		{0, 0, false},
		{-time.Millisecond, 0, false},
		{time.Nanosecond, 0, false},
		{1500 * time.Microsecond, 0, false},
		{time.Second + time.Nanosecond, 0, false},
	}
	for _, tt := range tests {
		got, err := ValidateTTL(tt.ttl)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("ValidateTTL(%s) = %d, %v; want %d ok=%v", tt.ttl, got, err, tt.want, tt.ok)
		}
		if err != nil && CodeOf(err) != InvalidArgument {
			t.Errorf("ValidateTTL(%s) code %s", tt.ttl, CodeOf(err))
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
		code  Code // "" when a fence is issued
	}{
		{"off: counter+1", 41, now, FloorOff, 42, ""},
		{"off: the last fence", FenceMax - 1, now, FloorOff, FenceMax, ""},
		{"off: overflow", FenceMax, now, FloorOff, 0, Internal},
		{"clock: an old counter jumps to the floor", 41, now, FloorClock, fl, ""},
		{"clock: a fresh counter starts at the floor", 0, now, FloorClock, fl, ""},
		{"clock: at the floor, one more", fl, now, FloorClock, fl + 1, ""},
		{"clock: ahead within the cap", fl + FloorLeadMax - 1, now, FloorClock, fl + FloorLeadMax, ""},
		{"clock: one past the cap", fl + FloorLeadMax, now, FloorClock, 0, ServiceUnavailable},
		{"clock: far ahead (a clock that stepped back)", fl + 10*FloorLeadMax, now, FloorClock, 0, ServiceUnavailable},
		{"clock: before the epoch the floor is 0", 41, FloorEpochMs - 5, FloorClock, 42, ""},
		{"clock: overflow first", FenceMax, now, FloorClock, 0, Internal},
		{"clock: a floor past FenceMax", 41, FloorEpochMs + FenceMax/FloorPerMs + 1, FloorClock, 0, Internal},
	} {
		const key = "tenant/secret"
		n, f, err := NextFenceAt("acquire", key, tt.last, tt.now, tt.floor)
		if tt.code == "" {
			if err != nil || n != tt.want || f != fmt.Sprintf("%015d", tt.want) {
				t.Errorf("%s: NextFenceAt(%d) = %d, %q, %v; want %d", tt.name, tt.last, n, f, err, tt.want)
			}
			continue
		}
		var le *Error
		if !errors.As(err, &le) || le.Code != tt.code || le.Op != "acquire" || le.Key != key {
			t.Errorf("%s: NextFenceAt(%d) = %d, %v; want a %s error for the key", tt.name, tt.last, n, err, tt.code)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, key) || !strings.Contains(msg, HashKey(key)) {
			t.Errorf("%s: error %q: want the key hash, not the key", tt.name, msg)
		}
	}
}

// TestFenceFloorFitsForDecades: the floor stays below FenceWarn until 2053
// and below FenceMax for centuries, and is exact in a Lua double.
func TestFenceFloorFitsForDecades(t *testing.T) {
	at := func(y int) int64 { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() }
	if f := FenceFloorAt(at(2053)); f >= FenceWarn {
		t.Errorf("floor on 2053-01-01 = %d, past FenceWarn", f)
	}
	if f := FenceFloorAt(at(2054)); f <= FenceWarn {
		t.Errorf("floor on 2054-01-01 = %d; the warning level was meant to be reached in 2053", f)
	}
	if f := FenceFloorAt(at(2300)); f >= FenceMax || f >= 1<<53 {
		t.Errorf("floor on 2300-01-01 = %d, past FenceMax or 2^53", f)
	}
}

// TestNoteFence: one warning, at Warn, only past FenceWarn, with the key's
// hash under "keyHash" and never the raw key: the same on every backend.
func TestNoteFence(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	const key = "tenant/secret"
	NoteFence(context.Background(), log, key, FenceWarn)
	if buf.Len() != 0 {
		t.Fatalf("warning at exactly FenceWarn: %s", buf.String())
	}
	NoteFence(context.Background(), log, key, FenceWarn+1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want one JSON record, got %q: %v", buf.String(), err)
	}
	if rec["level"] != "WARN" || rec["keyHash"] != HashKey(key) || rec["fence"] != "090000000000001" {
		t.Fatalf("warning = %v; want level WARN, keyHash and the 15-digit fence", rec)
	}
	if strings.Contains(buf.String(), key) {
		t.Fatalf("warning leaks the raw key: %s", buf.String())
	}
}
