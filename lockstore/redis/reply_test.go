package redis

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// cjsonQuote quotes s as lua-cjson does: '"', '\\' and '/' and the control
// bytes are escaped, everything else is copied.
func cjsonQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '/':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// decodeCorpus is lock values as the scripts write them (for every key of
// encodingKeys) and as others may have stored them.
func decodeCorpus() []string {
	var c []string
	for i, k := range append(encodingKeys(), "", "a\\/b", `\`, `"`, "\xff\xfe", "é") {
		c = append(c, fmt.Sprintf(`{"lockId":"AAAAAAAAAAAAAAAAAAAA%02d","expiresAtMs":%d,"acquiredAtMs":%d,"key":%s,"fence":"%015d"}`,
			i, 1764000000000+int64(i), 1763999990000, cjsonQuote(k), i))
	}
	const id = `"lockId":"SyncGuardWroteThis0123"`
	return append(c,
		`{"fence":"000000000000007","key":"a\/b","acquiredAtMs":1,`+id+`,"expiresAtMs":1764000000000}`,
		`{`+id+`, "expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"000000000000001"}`,
		`{`+id+`,"expiresAtMs":1.764e12,"acquiredAtMs":1,"key":"k","fence":"000000000000001"}`,
		`{`+id+`,"expiresAtMs":1764000000000.0,"acquiredAtMs":1,"key":"k","fence":"1"}`,
		`{`+id+`,"expiresAtMs":-0,"acquiredAtMs":-5,"key":"k","fence":"1"}`,
		`{`+id+`,"expiresAtMs":01,"acquiredAtMs":1,"key":"k","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1234567890123456789,"acquiredAtMs":1,"key":"k","fence":"1"}`,
		`{`+id+`,"expiresAtMs":123456789012345678,"acquiredAtMs":1,"key":"k","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"1"} `,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"1"}x`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"1"`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"a\u002fb","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"a`+"\x01"+`b","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"a\qb","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"k\","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":null,"fence":1}`,
		`{`+id+`,"expiresAtMs":"1","acquiredAtMs":1,"key":"k","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"1","lockId":"other"}`,
		`{"lockid":"x","expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"1"}`,
		`{`+id+`,"expiresAtMs":1,"acquiredAtMs":1}`,
		`5`, ``, `{}`, `null`, `[]`,
	)
}

// agreesWithJSON reports where scan and encoding/json disagree on raw: a
// value scan accepts must decode with encoding/json to the same lock.
func agreesWithJSON(scan func(string) (storedLock, bool), raw string) error {
	got, ok := scan(raw)
	if !ok {
		return nil
	}
	want, err := decodeLockJSON(raw)
	if err != nil {
		return fmt.Errorf("scanned %q as %+v; encoding/json refuses it: %v", raw, got, err)
	}
	if got != *want {
		return fmt.Errorf("scanned %q as %+v; encoding/json reads %+v", raw, got, *want)
	}
	return nil
}

// naiveScan is a deliberately broken scanner, a regular expression that
// neither resolves escapes nor refuses control bytes.
var naiveRE = regexp.MustCompile(`^\{"lockId":"([^"]*)","expiresAtMs":(\d+),"acquiredAtMs":(\d+),"key":"(.*)","fence":"([^"]*)"\}$`)

func naiveScan(raw string) (storedLock, bool) {
	m := naiveRE.FindStringSubmatch(raw)
	if m == nil {
		return storedLock{}, false
	}
	exp, _ := strconv.ParseInt(m[2], 10, 64)
	acq, _ := strconv.ParseInt(m[3], 10, 64)
	return storedLock{LockID: m[1], ExpiresAtMs: exp, AcquiredAtMs: acq, Key: m[4], Fence: m[5]}, true
}

// TestDecodeLockAgrees: the scanner reads every value the scripts write
// (so Inspect never needs encoding/json for fencegate's own locks), agrees
// with encoding/json on all it accepts, and the comparison catches a naive
// scanner.
func TestDecodeLockAgrees(t *testing.T) {
	naiveWrong := 0
	for _, raw := range decodeCorpus() {
		if err := agreesWithJSON(scanLock, raw); err != nil {
			t.Error(err)
		}
		if agreesWithJSON(naiveScan, raw) != nil {
			naiveWrong++
		}
		l, err := decodeLock(raw)
		if want, werr := decodeLockJSON(raw); (err == nil) != (werr == nil) || (err == nil && *l != *want) {
			t.Errorf("decodeLock(%q) = %+v, %v; encoding/json: %+v, %v", raw, l, err, want, werr)
		}
	}
	// Every value the scripts write for a key without control bytes (which
	// cjson writes as \n, \u0001 …) is the scanner's.
	for _, k := range append(encodingKeys(), `a\/b`, `\`, `"`, "é") {
		if strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 }) {
			continue
		}
		raw := fmt.Sprintf(`{"lockId":"AAAAAAAAAAAAAAAAAAAAAA","expiresAtMs":1764000000000,"acquiredAtMs":1763999990000,"key":%s,"fence":"000000000000001"}`, cjsonQuote(k))
		if l, ok := scanLock(raw); !ok || l.Key != k {
			t.Errorf("scanLock(%s) = %+v, %v; want the key %q", raw, l, ok, k)
		}
	}
	if naiveWrong == 0 {
		t.Error("the comparison did not catch the naive scanner on any value")
	}
}

// FuzzDecodeLock: on any input, a value the scanner accepts decodes to the
// same lock with encoding/json.
//
//	go test -run '^$' -fuzz FuzzDecodeLock -fuzztime 60s ./lockstore/redis/
func FuzzDecodeLock(f *testing.F) {
	for _, raw := range decodeCorpus() {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if err := agreesWithJSON(scanLock, raw); err != nil {
			t.Error(err)
		}
	})
}

// TestAcquiredReply: the acquire script's success reply parses, and
// anything else is a bad reply rather than a lock.
func TestAcquiredReply(t *testing.T) {
	if f, e, err := acquired("42:1764000000000"); err != nil || f != 42 || e != 1764000000000 {
		t.Errorf(`acquired("42:1764000000000") = %d, %d, %v`, f, e, err)
	}
	for _, r := range []string{"", "42", "42:", ":1", "x:1", "1:x", "1:2:3", "1.5:2"} {
		if _, _, err := acquired(r); err == nil {
			t.Errorf("acquired(%q) succeeded", r)
		}
	}
}
