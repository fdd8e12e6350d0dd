package lockserver

import (
	"strconv"

	"github.com/fencegate/fencegate/api/wire"
)

// The lock API's hot request bodies ({"key":"orders/42","ttlMs":30000},
// {"lockId":"…"}) go through a small strict parser before encoding/json:
// encoding/json's Decoder cost each request a decoder, its read buffer, a
// scanner stack and reflection (~8 allocations, ~4 % of a cycle's CPU in
// bench/results/2026-11-27-profiles.md). The parser accepts only input on
// which encoding/json (DisallowUnknownFields, one value, nothing after it)
// stores exactly the same values, and gives up on everything else, which
// decodeJSON then hands to encoding/json as before: every error, and every
// body this parser does not recognise, is encoding/json's business, so
// the messages and the accepted language do not change.

// fastField is one member the parser may fill: a string (str) or an
// optional integer (num).
type fastField struct {
	name string
	str  *string
	num  **int64
}

// fastFields returns the fields of dst the parser knows, or nil for a
// body type it does not handle.
func fastFields(dst any, buf *[3]fastField) []fastField {
	switch d := dst.(type) {
	case *wire.AcquireRequest:
		buf[0] = fastField{name: "key", str: &d.Key}
		buf[1] = fastField{name: "ttlMs", num: &d.TTLMs}
		buf[2] = fastField{name: "waitMs", num: &d.WaitMs}
		return buf[:3]
	case *wire.ReleaseRequest:
		buf[0] = fastField{name: "lockId", str: &d.LockID}
		return buf[:1]
	case *wire.ExtendRequest:
		buf[0] = fastField{name: "lockId", str: &d.LockID}
		buf[1] = fastField{name: "ttlMs", num: &d.TTLMs}
		return buf[:2]
	}
	return nil
}

// decodeFast parses b into fields when b is one JSON object, with JSON
// whitespace around and between its tokens only, whose members each name
// one of fields exactly (case included) at most once, with a value of
// that field's type spelled plainly: a string of printable ASCII with no
// escape, or an integer (no fraction, exponent or leading zero) that fits
// an int64. It writes nothing unless it accepts the whole body; on false
// the caller must decode b with encoding/json.
func decodeFast(b []byte, fields []fastField) bool {
	var (
		strs [3]string
		nums [3]int64
		seen [3]bool
	)
	if len(fields) > len(seen) {
		return false
	}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			name, j, ok := plainString(b, i)
			if !ok {
				return false
			}
			f := -1
			for k := range fields {
				if fields[k].name == string(name) {
					f = k
					break
				}
			}
			if f < 0 || seen[f] {
				return false // unknown, differently cased or repeated: encoding/json decides
			}
			seen[f] = true
			j = skipWS(b, j)
			if j >= len(b) || b[j] != ':' {
				return false
			}
			j = skipWS(b, j+1)
			if fields[f].str != nil {
				v, k, ok := plainString(b, j)
				if !ok {
					return false
				}
				strs[f], j = string(v), k
			} else {
				n, k, ok := plainInt(b, j)
				if !ok {
					return false
				}
				nums[f], j = n, k
			}
			j = skipWS(b, j)
			if j >= len(b) {
				return false
			}
			if b[j] == '}' {
				i = j + 1
				break
			}
			if b[j] != ',' {
				return false
			}
			i = skipWS(b, j+1)
		}
	}
	if skipWS(b, i) != len(b) {
		return false
	}
	for k, f := range fields {
		if !seen[k] {
			continue
		}
		if f.str != nil {
			*f.str = strs[k]
		} else {
			n := nums[k]
			*f.num = &n
		}
	}
	return true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at b[i] made of printable ASCII only
// (0x20–0x7e), with no backslash, and returns its contents and the index
// after the closing quote.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// plainInt reads a JSON integer at b[i]: -?(0|[1-9][0-9]*), not followed
// by a fraction or an exponent, within int64.
func plainInt(b []byte, i int) (int64, int, bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	start := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	digits := j - start
	if digits == 0 || (digits > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(b[i:j]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return n, j, true
}
