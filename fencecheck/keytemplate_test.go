package fencecheck

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// keyTemplateCase: bad and badTpl as in ExpandKey's errors (ErrKeyPath,
// ErrBadTemplate).
type keyTemplateCase struct {
	tpl, path, want string
	bad, badTpl     bool
}

var keyTemplateCases = []keyTemplateCase{
	{"orders/{2}", "/orders/42", "orders/42", false, false},
	{"orders/{2}", "/orders/42?x=/y", "orders/42", false, false},
	{"orders/{2}", "/orders/42#frag", "orders/42", false, false},
	{"{1}/{3}", "/a/b/c/d", "a/c", false, false},
	{"literal", "/anything", "literal", false, false},
	{"orders/{2}", "/orders", "", true, false},
	{"orders/{2}", "/orders/", "", true, false},
	{"orders/{2}", "/orders//x", "", true, false},
	{"orders/{2}", "/orders/%zz", "", true, false},
	{"orders/{2}", "/orders/4%2", "", true, false},
	// Templates that do not parse.
	{"orders/{0}", "/orders/1", "", true, true},
	{"orders/{x}", "/orders/1", "", true, true},
	{"orders/{2", "/orders/1", "", true, true},
	{"orders/2}", "/orders/1", "", true, true},
	{"orders/{+2}", "/orders/1", "", true, true},
	{"orders/{02}", "/orders/1", "", true, true},
	{"orders/{256}", "/orders/1", "", true, true},
	{"orders/{2:float}", "/orders/1", "", true, true},
	{"orders/{2:INT}", "/orders/1", "", true, true},
	// Two placeholders must not run into each other: "/a:b/c" and
	// "/a/b:c" would both be "a:b:c" under "{1}:{2}".
	{"{1}:{2}", "/a/b", "", true, true},
	{"{1}{2}", "/a/b", "", true, true},
	{"{1:int}{2}", "/1/b", "", true, true},
	{"{1:int}5{2}", "/1/b", "", true, true},
	{"{1:int}-{2}", "/1/b", "1-b", false, false},
	{"{1:uuid}{2}", "/0f8fad5b-d9cb-469f-a165-70867728950e/b", "0f8fad5b-d9cb-469f-a165-70867728950eb", false, false},
	// Paths a proxy or upstream would normalise to another resource than
	// the segments say.
	{"orders/{2}", "//orders/42", "", true, false},              // nginx routes /orders/42; segment 2 is "orders"
	{"orders/{2}", "/orders/x/../42", "", true, false},          // upstream sees /orders/42; segment 2 is "x"
	{"orders/{2}", "/orders/./42", "", true, false},             // segment 2 is "."
	{"orders/{2}", "/orders/42/..", "", true, false},            // a dot segment after the key's
	{"orders/{2}", "/orders/42/x//y", "", true, false},          // an empty segment after the key's
	{"orders/{2}", "/orders/%2e%2e/42", "", true, false},        // encoded ".."
	{"orders/{2}", "/orders/%2E%2e/42", "", true, false},        // mixed case
	{"orders/{2}", "/orders/.%2E/42", "", true, false},          // half encoded
	{"orders/{2}", "/orders/%2e/42", "", true, false},           // encoded "."
	{"orders/{2}", "/orders/a%2Fb", "", true, false},            // encoded slash inside a segment
	{"orders/{2}", "/orders/a%2fb", "", true, false},            // lower case
	{"orders/{2}", "/orders/..;/42", "", true, false},           // Tomcat: ".." with a path parameter
	{"orders/{2}", "/orders/42\\..\\43", "", true, false},       // '\' is '/' to some servers
	{"orders/{2}", "/orders/42%5C..%5C43", "", true, false},     // and decoded
	{"orders/{3}", "/public/..%5Cpayments/42", "", true, false}, // even in a segment the template does not read
	{"orders/{2}", "orders/42", "", true, false},                // not origin-form
	{"orders/{2}", "/orders/42/", "orders/42", false, false},
	{"orders/{2}", "/orders/...", "orders/...", false, false},
	{"orders/{2}", "/orders/.x", "orders/.x", false, false},
	{"orders/{2}", "/orders/42?x=/../y//z;m", "orders/42", false, false}, // the query is not the path
	{"literal", "//x/../y;z", "literal", false, false},                   // a literal key does not read the path

	// Issue #11 item 2: one resource, one key. Each of these is order 42 to
	// some upstream, and was a key of its own.
	{"orders/{2}", "/orders/42;x", "", true, false},                    // Servlet/Spring drop ";…"
	{"orders/{2}", "/orders/42;", "", true, false},                     //
	{"orders/{2}", "/orders/42/items;v=1", "", true, false},            // ";" anywhere in the path
	{"orders/{2}", "/orders/42%3Bx", "", true, false},                  // decoded before dropping ";…"
	{"orders/{2:int}", "/orders/042", "", true, false},                 // Atoi, int(), parseInt read 42
	{"orders/{2:int}", "/orders/+42", "", true, false},                 // a sign
	{"orders/{2:int}", "/orders/-0", "", true, false},                  //
	{"orders/{2}", "/orders/%2B42", "", true, false},                   // "+" needs no encoding
	{"orders/{2:int}", "/orders/%2B42", "", true, false},               //
	{"orders/{2}", "/orders/%34%32", "", true, false},                  // digits need no encoding
	{"orders/{2}", "/orders/4%32", "", true, false},                    //
	{"orders/{2}", "/orders/%41", "", true, false},                     // nor letters
	{"orders/{2}", "/orders/%7E", "", true, false},                     // nor unreserved marks
	{"orders/{2}", "/orders/%EF%BC%94%EF%BC%92", "", true, false},      // ４２ full-width: Java, Python read 42
	{"orders/{2}", "/orders/４２", "", true, false},                      // the same, raw
	{"orders/{2}", "/orders/%D9%A4%D9%A2", "", true, false},            // ٤٢ Arabic-Indic digits (NFKC-stable)
	{"orders/{2}", "/orders/%F0%9D%9F%92", "", true, false},            // 𝟒 mathematical digit
	{"orders/{2}", "/orders/%C2%B2", "", true, false},                  // ² superscript
	{"orders/{2}", "/orders/%EF%AC%81x", "", true, false},              // "ﬁ" ligature
	{"orders/{2}", "/orders/e%CC%81", "", true, false},                 // e + combining acute: not NFC
	{"orders/{2}", "/orders/4%E2%80%8B2", "", true, false},             // zero-width space
	{"orders/{2}", "/orders/42%00", "", true, false},                   // NUL
	{"orders/{2}", "/orders/42%0A", "", true, false},                   // newline
	{"orders/{2}", "/orders/%C2%A042", "", true, false},                // no-break space (NFKC → space)
	{"orders/{2}", "/orders/%FF", "", true, false},                     // not UTF-8
	{"orders/{2}", "/orders/4 2", "", true, false},                     // a raw space must be encoded
	{"orders/{2:int}", "/orders/1234567890123456789", "", true, false}, // 19 digits
	{"orders/{2:int}", "/orders/42x", "", true, false},
	{"orders/{2:uuid}", "/orders/0F8FAD5B-D9CB-469F-A165-70867728950E", "", true, false},
	{"orders/{2:uuid}", "/orders/0f8fad5bd9cb469fa16570867728950e", "", true, false},
	{"orders/{2:uuid}", "/orders/{0f8fad5b-d9cb-469f-a165-70867728950e}", "", true, false},
	// Canonical spellings stay accepted.
	{"orders/{2:int}", "/orders/42", "orders/42", false, false},
	{"orders/{2:int}", "/orders/0", "orders/0", false, false},
	{"orders/{2:int}", "/orders/123456789012345678", "orders/123456789012345678", false, false},
	{"orders/{2:uuid}", "/orders/0f8fad5b-d9cb-469f-a165-70867728950e", "orders/0f8fad5b-d9cb-469f-a165-70867728950e", false, false},
	{"orders/{2}", "/orders/042", "orders/042", false, false}, // untyped: a string id
	{"orders/{2}", "/orders/+42", "orders/+42", false, false}, //
	{"orders/{2}", "/orders/a%20b", "orders/a b", false, false},
	{"orders/{2}", "/orders/caf%C3%A9", "orders/café", false, false},
	{"orders/{2}", "/orders/caf%c3%a9", "orders/café", false, false}, // hex case is not a second key
	{"orders/{2}", "/orders/%E8%AE%A2%E5%8D%95", "orders/订单", false, false},
	{"orders/{2}", "/orders/a:b@c!$&'()*+,=~-._", "orders/a:b@c!$&'()*+,=~-._", false, false},
	{"orders/{2}", "/orders/100%25", "orders/100%", false, false},
	{"orders/{2}", "/%6Frders/42", "orders/42", false, false}, // only the templated segments must be canonical
}

func TestExpandKey(t *testing.T) {
	for _, tc := range keyTemplateCases {
		got, err := ExpandKey(tc.tpl, tc.path)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ExpandKey(%q, %q) = %q, %v", tc.tpl, tc.path, got, err)
		}
		if tc.bad && !errors.Is(err, ErrBadTemplate) && !errors.Is(err, ErrKeyPath) {
			t.Errorf("ExpandKey(%q, %q): error %v wraps neither ErrBadTemplate nor ErrKeyPath", tc.tpl, tc.path, err)
		}
		if tc.badTpl != errors.Is(err, ErrBadTemplate) {
			t.Errorf("ExpandKey(%q, %q): template error = %v, want %v", tc.tpl, tc.path, err, tc.badTpl)
		}
	}
}

// TestKeyTemplateRulesCatch proves each canonical-form rule is needed: with
// the rule switched off, some input of the table above is accepted.
func TestKeyTemplateRulesCatch(t *testing.T) {
	for name, r := range map[string]rules{
		"matrix":   {skipMatrix: true},
		"encoding": {skipEncoding: true},
		"unicode":  {skipUnicode: true},
		"type":     {skipType: true},
	} {
		caught := 0
		for _, tc := range keyTemplateCases {
			if !tc.bad || tc.badTpl {
				continue
			}
			kt, err := ParseKeyTemplate(tc.tpl)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kt.values(tc.path, r); err == nil {
				caught++
			}
		}
		if caught == 0 {
			t.Errorf("with the %s rule off, every refused path is still refused: the table does not test it", name)
		}
	}
}

// FuzzExpandKey: Expand never panics, and a key names one resource: an
// accepted segment is exactly its value's canonical spelling, the key
// re-expands from the canonical path, and two paths that name the same key
// name the same segment values.
func FuzzExpandKey(f *testing.F) {
	for _, tc := range keyTemplateCases {
		f.Add(tc.tpl, tc.path, "/orders/42")
	}
	f.Add("{1:int}-{2:uuid}/{4}", "/7/0f8fad5b-d9cb-469f-a165-70867728950e/x/y", "/7/0f8fad5b-d9cb-469f-a165-70867728950e/z/y")
	f.Fuzz(func(t *testing.T, tpl, path1, path2 string) {
		kt, err := ParseKeyTemplate(tpl)
		if err != nil {
			if !errors.Is(err, ErrBadTemplate) {
				t.Fatalf("template error %v does not wrap ErrBadTemplate", err)
			}
			return
		}
		k1, err1 := kt.Expand(path1)
		k2, err2 := kt.Expand(path2)
		if kt.Literal() {
			if k1 != tpl || err1 != nil {
				t.Fatalf("literal %q expanded to %q, %v", tpl, k1, err1)
			}
			return
		}
		for _, e := range []error{err1, err2} {
			if e != nil && !errors.Is(e, ErrKeyPath) {
				t.Fatalf("path error %v does not wrap ErrKeyPath", e)
			}
		}
		if err1 != nil {
			return
		}
		v1, _ := kt.values(path1, rules{})
		maxSeg := 0
		for i, p := range kt.parts {
			if p.seg == 0 {
				continue
			}
			maxSeg = max(maxSeg, p.seg)
			if !utf8.ValidString(v1[i]) || v1[i] == "" || strings.ContainsAny(v1[i], "/;\\") {
				t.Fatalf("%q: segment %d value %q", path1, p.seg, v1[i])
			}
			raw := strings.Split(strings.SplitN(strings.SplitN(path1, "?", 2)[0], "#", 2)[0], "/")[p.seg]
			if enc := EncodeSegment(v1[i]); stripHex(enc) != stripHex(raw) {
				t.Fatalf("%q: accepted segment %q is not its canonical spelling %q", path1, raw, enc)
			}
		}
		// The canonical path: the templated segments' canonical spellings,
		// "x" elsewhere.
		segs := make([]string, maxSeg)
		for i := range segs {
			segs[i] = "x"
		}
		for i, p := range kt.parts {
			if p.seg > 0 {
				segs[p.seg-1] = EncodeSegment(v1[i])
			}
		}
		canon := "/" + strings.Join(segs, "/")
		if kc, err := kt.Expand(canon); err != nil || kc != k1 {
			t.Fatalf("%q → %q, but its canonical path %q → %q, %v", path1, k1, canon, kc, err)
		}
		if err2 == nil && k1 == k2 {
			v2, _ := kt.values(path2, rules{})
			for i := range v1 {
				if v1[i] != v2[i] {
					t.Fatalf("%q and %q both name key %q with different segments %q, %q", path1, path2, k1, v1[i], v2[i])
				}
			}
		}
	})
}

// stripHex is s with its percent-escapes' hex digits upper-cased and
// everything else unchanged, so that two spellings differing only in hex
// case compare equal and nothing else does.
func stripHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = upper(b[i+1])
			b[i+2] = upper(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// TestCheckPath: the path rules an edge that routes by prefix applies to
// every request (the proxy): a path an upstream would normalise into
// another one, possibly under another route, is refused.
func TestCheckPath(t *testing.T) {
	for _, p := range []string{"/public/..%5Cpayments/1", "/public/..\\payments/1", "/a//b", "/a/../b", "/a/%2e%2e/b", "/a%2Fb", "/a;x/b"} {
		if err := CheckPath(p); !errors.Is(err, ErrKeyPath) {
			t.Errorf("CheckPath(%q) = %v, want ErrKeyPath", p, err)
		}
	}
	for _, p := range []string{"/", "/public/a%20b/1", "/orders/42/"} {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", p, err)
		}
	}
}
