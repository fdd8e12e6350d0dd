package lockstore

import (
	"context"
	"fmt"
	"log/slog"
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

// FenceOverflow is the error of an acquire of key whose fence counter is
// already at FenceMax: Internal, because nothing the caller sent was wrong.
// Every backend returns it, and writes nothing, in that case.
func FenceOverflow(op, key string) *Error {
	return &Error{Code: Internal, Op: op, Key: key,
		Msg: fmt.Sprintf("fence counter overflow: the key's counter is at FenceMax (%d) and nothing was written; rotate the key namespace", FenceMax)}
}

// NoteFence is what every backend does with a fence it has just issued for
// key: past FenceWarn it logs one warning (the key's hash, never the key),
// so operators have years to rotate the key namespace before FenceOverflow.
// Call it once per issued fence, after the write has committed, never from
// inside a transaction body that may run again.
func NoteFence(ctx context.Context, log *slog.Logger, key string, n int64) {
	if !FenceNeedsWarning(n) {
		return
	}
	f := fmt.Sprintf("%0*d", FenceDigits, n)
	log.WarnContext(ctx, "fence counter past the warning level; plan a key namespace rotation",
		"keyHash", HashKey(key), "fence", f, "fenceWarn", FenceWarn, "fenceMax", FenceMax)
}
