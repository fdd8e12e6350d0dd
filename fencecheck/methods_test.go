package fencecheck

import "testing"

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
	for _, bad := range []string{"PO ST;", "GET,(x)", "P\x00"} {
		if _, err := WriteMethods(bad); err == nil {
			t.Errorf("%q: want error", bad)
		}
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
