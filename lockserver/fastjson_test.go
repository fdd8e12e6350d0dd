package lockserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api/wire"
)

// fastBodies are request bodies around the fast path's edges: what it
// must accept, and what it must leave to encoding/json.
var fastBodies = []string{
	`{"key":"orders/42"}`, `{"key":"orders/42","ttlMs":30000}`, ` { "key" : "a" , "ttlMs" : 1 , "waitMs" : 0 } ` + "\n",
	`{}`, ` {}`, `{"ttlMs":-0}`, `{"ttlMs":-5}`, `{"ttlMs":9223372036854775807}`, `{"ttlMs":9223372036854775808}`,
	`{"ttlMs":01}`, `{"ttlMs":1.0}`, `{"ttlMs":1e3}`, `{"ttlMs":"1"}`, `{"ttlMs":null}`, `{"key":null}`,
	`{"key":"a","key":"b"}`, `{"KEY":"a"}`, `{"Key":"a","key":"b"}`, `{"key":"a","extra":1}`, `{"key":"a",}`,
	`{"key":"a"}{}`, `{"key":"a"} x`, `{"key":"a\"b"}`, `{"key":"a\u0041"}`, `{"key":"é"}`, "{\"key\":\"a\xff\"}",
	"{\"key\":\"a\tb\"}", `{"key":1}`, `{"key":true}`, `[]`, `"key"`, ``, ` `, `{`, `{"key"`, `{"key":`, `{"key":"a"`,
	"\ufeff{}", `{"lockId":"AAAAAAAAAAAAAAAAAAAAAA"}`, `{"lockId":"x","ttlMs":5}`, `{"lockid":"x"}`,
	`{"key":"a","ttlMs":5,"waitMs":6,"ttlMs":7}`, `{"key" "a"}`, `{,"key":"a"}`, `{"key":"a"]`, `{"waitMs":-}`,
}

// strictDecode is decodeJSON's encoding/json path on b.
func strictDecode(b []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errTrailing
	}
	return nil
}

var errTrailing = invalidArgument("trailing data")

// disagreements lists the bodies on which parse accepts something
// encoding/json would refuse or decode differently, for each request type.
func disagreements(parse func([]byte, []fastField) bool, bodies []string) []string {
	var bad []string
	for _, body := range bodies {
		for _, newDst := range []func() any{
			func() any { return new(wire.AcquireRequest) },
			func() any { return new(wire.ReleaseRequest) },
			func() any { return new(wire.ExtendRequest) },
		} {
			fast, ref := newDst(), newDst()
			var fb [3]fastField
			if !parse([]byte(body), fastFields(fast, &fb)) {
				if !reflect.DeepEqual(fast, newDst()) {
					bad = append(bad, body+" (wrote before giving up)")
				}
				continue
			}
			if err := strictDecode([]byte(body), ref); err != nil || !reflect.DeepEqual(fast, ref) {
				bad = append(bad, body)
			}
		}
	}
	return bad
}

// TestDecodeFastAgrees: whatever the fast path accepts, encoding/json
// (decodeJSON's strict settings) accepts with the same values; what it
// does not accept it leaves untouched. A broken variant that lets an
// unknown member through is caught.
func TestDecodeFastAgrees(t *testing.T) {
	unknown := regexp.MustCompile(`,"extra":1`)
	for _, tc := range []struct {
		name   string
		parse  func([]byte, []fastField) bool
		broken bool
	}{
		{"decodeFast", decodeFast, false},
		{"skips unknown members (broken)", func(b []byte, f []fastField) bool {
			return decodeFast(unknown.ReplaceAll(b, nil), f)
		}, true},
	} {
		bad := disagreements(tc.parse, fastBodies)
		if caught := len(bad) > 0; caught != tc.broken {
			t.Errorf("%s: disagreements %q (broken variant: %v)", tc.name, bad, tc.broken)
		}
	}
	// The common bodies do take the fast path.
	for _, body := range []string{`{"key":"orders/42","ttlMs":30000}`, `{"lockId":"AAAAAAAAAAAAAAAAAAAAAA"}`} {
		var req wire.AcquireRequest
		var rel wire.ReleaseRequest
		var fb [3]fastField
		if !decodeFast([]byte(body), fastFields(&req, &fb)) && !decodeFast([]byte(body), fastFields(&rel, &fb)) {
			t.Errorf("%s: not on the fast path", body)
		}
	}
}

// FuzzDecodeFast: the same property on any input.
func FuzzDecodeFast(f *testing.F) {
	for _, b := range fastBodies {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if bad := disagreements(decodeFast, []string{body}); len(bad) > 0 {
			t.Fatalf("fast path disagrees with encoding/json on %q", bad)
		}
	})
}

// TestDecodeJSONAroundFastBuffer: bodies around fastBodyBytes — read whole
// and parsed fast, or read partly and handed to encoding/json with the
// rest of the body — decode as encoding/json alone decodes them, errors
// included.
func TestDecodeJSONAroundFastBuffer(t *testing.T) {
	var bodies []string
	for _, n := range []int{fastBodyBytes - 1, fastBodyBytes, fastBodyBytes + 1, 3 * fastBodyBytes} {
		// {"key":"xxx…"} of exactly n bytes, then broken variants of it.
		key := strings.Repeat("k", n-len(`{"key":""}`))
		ok := `{"key":"` + key + `"}`
		bodies = append(bodies, ok, ok[:len(ok)-1], ok+`x`, ok[:len(ok)-2]+`\u0041"}`, `{"key":"`+key[1:]+`","x":1}`)
	}
	for _, body := range bodies {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var got, want wire.AcquireRequest
		gotErr := decodeJSON(httptest.NewRecorder(), r, &got)
		wantErr := strictDecode([]byte(body), &want)
		if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("body of %d bytes: decodeJSON %+v, %v; encoding/json %+v, %v", len(body), got.Key != "", gotErr, want.Key != "", wantErr)
		}
	}
}
