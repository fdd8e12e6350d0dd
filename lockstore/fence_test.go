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

// TestNextFence: the counter's successor, up to and including FenceMax;
// past it, FenceOverflow (Internal, naming the key only by its hash).
func TestNextFence(t *testing.T) {
	n, f, err := NextFence("acquire", "k", 41)
	if err != nil || n != 42 || f != "000000000000042" {
		t.Fatalf("NextFence(41) = %d, %q, %v", n, f, err)
	}
	if n, f, err := NextFence("acquire", "k", FenceMax-1); err != nil || n != FenceMax || f != "900000000000000" {
		t.Fatalf("NextFence(FenceMax-1) = %d, %q, %v; want FenceMax", n, f, err)
	}
	const key = "tenant/secret"
	_, _, err = NextFence("acquire", key, FenceMax)
	var le *Error
	if !errors.As(err, &le) || le.Code != Internal || le.Op != "acquire" || le.Key != key {
		t.Fatalf("NextFence(FenceMax) = %v, want FenceOverflow's Internal error for key", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "overflow") || strings.Contains(msg, key) ||
		!strings.Contains(msg, HashKey(key)) {
		t.Fatalf("overflow error %q: want 'overflow' and the key hash, not the key", msg)
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
