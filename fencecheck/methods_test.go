package fencecheck

import (
	"strings"
	"testing"
)

func TestWriteMethods(t *testing.T) {
	tests := []struct {
		spec   string
		writes []string
		reads  []string
		str    string
	}{
		// Methods are case-sensitive (RFC 9110 §9.1): only the exact
		// upper-case GET, HEAD and OPTIONS are reads; "get" may be a write
		// to an upstream that does not know it.
		{"", []string{"POST", "PUT", "PATCH", "DELETE", "PROPFIND", "post", "get", "Get", "head", "options", "", "GET "},
			[]string{"GET", "HEAD", "OPTIONS"}, ""},
		// A listed write method is a write in any case.
		{"POST,PUT", []string{"POST", "put", "pOsT"}, []string{"DELETE", "GET", "PATCH"}, "POST,PUT"},
		{" delete , patch ", []string{"DELETE", "PATCH"}, []string{"POST"}, "DELETE,PATCH"},
		{"*", []string{"GET", "POST", "HEAD"}, nil, "*"},
	}
	for _, tc := range tests {
		ms, err := WriteMethods(tc.spec)
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		for _, m := range tc.writes {
			if !ms.IsWrite(m) {
				t.Errorf("%q: %s should be a write", tc.spec, m)
			}
		}
		for _, m := range tc.reads {
			if ms.IsWrite(m) {
				t.Errorf("%q: %s should not be a write", tc.spec, m)
			}
		}
		if ms.String() != tc.str {
			t.Errorf("%q: String() = %q, want %q", tc.spec, ms.String(), tc.str)
		}
	}
	for _, bad := range []string{"PO ST;", "GET,(x)", "P\x00", "+", "+P T", ","} {
		if _, err := WriteMethods(bad); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}

// nonStandardSpecs are typos and custom methods without the opt-in: each
// must be refused, or a write method would silently be left out.
var nonStandardSpecs = []string{
	"bogus method!", // issue #11 item 8: became {BOGUS, METHOD!}, and PUT passed unfenced
	"PUTT",          // meant PUT
	"POST,PUTT",
	"POST PATCH DELET",
	"PROPFIND", // custom: needs "+PROPFIND"
	"post,put,get,pach",
}

// TestWriteMethodsStandardOnly: a name that is not a standard method is
// refused unless opted in with "+"; the opt-in round-trips through String.
func TestWriteMethodsStandardOnly(t *testing.T) {
	for _, spec := range nonStandardSpecs {
		if ms, err := WriteMethods(spec); err == nil {
			t.Errorf("WriteMethods(%q) = %v, want an error", spec, ms)
		} else if !strings.Contains(err.Error(), "+") {
			t.Errorf("WriteMethods(%q): error %q does not name the opt-in", spec, err)
		}
	}
	for _, m := range StandardMethods {
		for _, spelled := range []string{m, strings.ToLower(m)} {
			if ms, err := WriteMethods(spelled); err != nil || !ms.IsWrite(m) {
				t.Errorf("WriteMethods(%q) = %v, %v", spelled, ms, err)
			}
		}
	}
	ms, err := WriteMethods("PUT, +propfind ,+MKCOL")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"PUT", "PROPFIND", "propfind", "MKCOL"} {
		if !ms.IsWrite(m) {
			t.Errorf("%s should be a write", m)
		}
	}
	if ms.IsWrite("+PROPFIND") || ms.IsWrite("POST") {
		t.Error("the opt-in prefix is not part of the method; POST was not listed")
	}
	if ms.String() != "+MKCOL,+PROPFIND,PUT" {
		t.Errorf("String() = %q", ms.String())
	}
	again, err := WriteMethods(ms.String())
	if err != nil || again.String() != ms.String() {
		t.Errorf("String() does not round-trip: %v, %v", again, err)
	}
}

// TestWriteMethodsCheckCatches: without the standard-method check, the
// table above is accepted (the test can fail).
func TestWriteMethodsCheckCatches(t *testing.T) {
	accepted := 0
	for _, spec := range nonStandardSpecs {
		if _, err := parseWriteMethods(spec, true); err == nil {
			accepted++
		}
	}
	if accepted == 0 {
		t.Fatal("the broken parser refused every typo: the table does not test the standard-method check")
	}
}

func TestParsePolicyMode(t *testing.T) {
	for in, want := range map[string]Policy{"": PolicyHolder, "holder": PolicyHolder, "LATEST": PolicyLatest, " off ": PolicyOff} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %q, %v", in, got, err)
		}
	}
	for in, want := range map[string]Mode{"": ModeEnforce, "enforce": ModeEnforce, "dry-run": ModeDryRun, "dryrun": ModeDryRun, "Warn": ModeWarn} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParsePolicy("newest"); err == nil {
		t.Error("ParsePolicy(newest): want error")
	}
	if _, err := ParseMode("loud"); err == nil {
		t.Error("ParseMode(loud): want error")
	}
}
