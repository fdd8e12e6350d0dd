package lockstore

import (
	"fmt"
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
