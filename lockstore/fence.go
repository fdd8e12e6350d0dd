package lockstore

import (
	"strconv"
)

// Fence limits (docs/design.md, "Fences"): fences are 15-digit
// zero-padded decimal strings, so string order is numeric order and every
// value is exact in a Lua double.
const (
	FenceDigits = 15
	// FenceMax is the largest fence a backend may issue. A counter that would
	// pass it fails the acquire with Internal and writes nothing.
	FenceMax int64 = 900_000_000_000_000
	// FenceWarn is the level above which backends log a warning, leaving
	// operators years to rotate the key namespace.
	FenceWarn int64 = 90_000_000_000_000
)

// FormatFence renders n as a 15-digit fence. n must be in [1, FenceMax].
func FormatFence(n int64) (string, error) {
	if n < 1 || n > FenceMax {
		return "", Errorf(Internal, "fence", "fence counter %d outside [1, %d]", n, FenceMax)
	}
	var b [FenceDigits]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[:]), nil
}

// ParseFence parses a 15-digit fence. It accepts exactly FenceDigits ASCII
// digits: "42" or "+00000000000042" are malformed, because a fence compared
// as a string must have exactly one spelling.
func ParseFence(s string) (int64, error) {
	if !ValidFence(s) {
		return 0, Errorf(InvalidArgument, "fence", "fence must be exactly %d decimal digits", FenceDigits)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, Errorf(InvalidArgument, "fence", "fence does not parse: %v", err)
	}
	return n, nil
}

// ValidFence reports whether s is exactly FenceDigits ASCII digits.
func ValidFence(s string) bool {
	if len(s) != FenceDigits {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FenceNeedsWarning reports whether n is past FenceWarn.
func FenceNeedsWarning(n int64) bool { return n > FenceWarn }
