package redis

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// storedLock is SyncGuard's lock value.
type storedLock struct {
	LockID       string `json:"lockId"`
	ExpiresAtMs  int64  `json:"-"`
	AcquiredAtMs int64  `json:"-"`
	Key          string `json:"key"`
	Fence        string `json:"fence"`
}

// decodeLock parses a lock value. The value fencegate's scripts write (its
// fixed field order, integer times, strings whose only escapes are \/, \"
// and \\) is read by scanLock without encoding/json, which on Inspect's
// path cost several microseconds a call; anything else (SyncGuard's cjson
// field order, other escapes, 1.7e12 times, malformed values) goes to
// decodeLockJSON. Both give the same result for every value scanLock
// accepts; TestDecodeLockAgrees and FuzzDecodeLock hold them to that.
func decodeLock(raw string) (*storedLock, error) {
	if l, ok := scanLock(raw); ok {
		return &l, nil
	}
	return decodeLockJSON(raw)
}

// decodeLockJSON parses a lock value with encoding/json. Times are decoded
// as JSON numbers so a value another writer stored as 1.7e12 still parses.
func decodeLockJSON(raw string) (*storedLock, error) {
	var v struct {
		storedLock
		ExpiresAtMs  json.Number `json:"expiresAtMs"`
		AcquiredAtMs json.Number `json:"acquiredAtMs"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("lock value is not JSON: %w", err)
	}
	exp, err := jsonInt(v.ExpiresAtMs)
	if err != nil {
		return nil, fmt.Errorf("lock value expiresAtMs: %w", err)
	}
	acq, _ := jsonInt(v.AcquiredAtMs) // informational only
	l := v.storedLock
	l.ExpiresAtMs, l.AcquiredAtMs = exp, acq
	return &l, nil
}

// scanLock reads a value of exactly the shape the scripts write,
//
//	{"lockId":"…","expiresAtMs":N,"acquiredAtMs":N,"key":"…","fence":"…"}
//
// and reports false for anything else, leaving it to encoding/json.
func scanLock(raw string) (storedLock, bool) {
	var l storedLock
	rest, ok := strings.CutPrefix(raw, `{"lockId":`)
	if !ok {
		return l, false
	}
	if l.LockID, rest, ok = scanString(rest); !ok {
		return l, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"expiresAtMs":`); !ok {
		return l, false
	}
	if l.ExpiresAtMs, rest, ok = scanInt(rest); !ok {
		return l, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"acquiredAtMs":`); !ok {
		return l, false
	}
	if l.AcquiredAtMs, rest, ok = scanInt(rest); !ok {
		return l, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"key":`); !ok {
		return l, false
	}
	if l.Key, rest, ok = scanString(rest); !ok {
		return l, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"fence":`); !ok {
		return l, false
	}
	if l.Fence, rest, ok = scanString(rest); !ok {
		return l, false
	}
	return l, rest == "}"
}

// scanString reads a JSON string at the start of s and returns its value and
// what follows. It accepts only valid UTF-8 without control bytes and only
// the escapes \/, \" and \\ (all cjson writes for a key without control
// bytes); anything else reports false.
func scanString(s string) (string, string, bool) {
	if len(s) == 0 || s[0] != '"' {
		return "", s, false
	}
	escaped := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			v := s[1:i]
			if !utf8.ValidString(v) {
				return "", s, false
			}
			if escaped {
				v = unescape(v)
			}
			return v, s[i+1:], true
		case c < 0x20:
			return "", s, false
		case c == '\\':
			if i+1 == len(s) {
				return "", s, false
			}
			switch s[i+1] {
			case '/', '"', '\\':
				escaped = true
				i++
			default:
				return "", s, false
			}
		}
	}
	return "", s, false
}

// unescape resolves the escapes scanString accepted: a backslash and the
// byte after it become that byte.
func unescape(v string) string {
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// scanInt reads a JSON integer (no fraction or exponent, at most 18 digits,
// so it cannot overflow) at the start of s.
func scanInt(s string) (int64, string, bool) {
	i := 0
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		i++
	}
	start := i
	var n int64
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && s[start] == '0') {
		return 0, s, false
	}
	if i < len(s) && (s[i] == '.' || s[i] == 'e' || s[i] == 'E') {
		return 0, s, false
	}
	if neg {
		n = -n
	}
	return n, s[i:], true
}

func jsonInt(n json.Number) (int64, error) {
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not an integer: %q", string(n))
	}
	return int64(f), nil
}

// liveLock reads the reply's lock value at index vi and the server clock at
// index ni, and returns the lock if the liveness predicate holds.
func liveLock(reply []any, vi, ni int) (*storedLock, int64, error) {
	now, err := replyInt(reply, ni)
	if err != nil {
		return nil, 0, err
	}
	raw, ok := reply[vi].(string)
	if !ok {
		return nil, now, nil
	}
	l, err := decodeLock(raw)
	if err != nil {
		return nil, now, err
	}
	if !backend.IsLive(l.ExpiresAtMs, now) {
		return nil, now, nil
	}
	return l, now, nil
}

// info is the sanitised view of l, the lock on normalised key.
func info(key string, l *storedLock) *lockstore.LockInfo {
	return lockstore.Lock{Key: key, LockID: l.LockID, Fence: l.Fence, ExpiresAtMs: l.ExpiresAtMs, AcquiredAtMs: l.AcquiredAtMs}.Info()
}

// replyInt returns reply[i] as an integer.
func replyInt(reply []any, i int) (int64, error) {
	if i >= len(reply) {
		return 0, fmt.Errorf("reply has %d fields, want more than %d", len(reply), i)
	}
	n, ok := reply[i].(int64)
	if !ok {
		return 0, fmt.Errorf("reply field %d is %T, want an integer", i, reply[i])
	}
	return n, nil
}

func badReply(op string, err error) *lockstore.Error {
	return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "unexpected script reply", Err: err}
}
