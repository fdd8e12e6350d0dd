package routes

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
)

// legacyHost is the Host reading before #26: the port and ONE trailing
// dot dropped, lower-cased, nothing checked (a broken variant).
func legacyHost(h string) (string, bool) {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), "."), true
}

// oneDotHost reads hosts as canonicalHost does, but drops one trailing
// dot only (a broken variant).
func oneDotHost(h string) (string, bool) {
	if strings.HasSuffix(h, "..") {
		return strings.ToLower(strings.TrimSuffix(h, ".")), true
	}
	return canonicalHost(h)
}

// TestHostSpellingsSelectOneEntry: beside a host-less entry with policy
// off, a strict host-scoped entry governs every spelling of its names —
// case, trailing dots (one or many), a port, fullwidth forms, the
// ideographic full stop, Unicode and xn-- forms of an IDNA name — and a
// Host that is no spelling of a name (a stray character, an empty label,
// a port that is not a number, an empty Host) gets ErrBadHost, so its
// writes are refused rather than falling to the weaker entry. The Host
// reading before #26 and one that drops a single trailing dot are caught.
func TestHostSpellingsSelectOneEntry(t *testing.T) {
	table := []config.Route{
		{Name: "strict", Match: config.RouteMatch{Hosts: []string{"api.example.com", "bücher.example"}, Path: config.RoutePath{Type: PathTemplate, Value: "/orders/{int}"}},
			Key: "orders/{2:int}", Proof: "signed"},
		{Name: "open", Match: config.RouteMatch{Path: config.RoutePath{Value: "/"}}, Policy: "off"},
	}
	same := []string{
		"api.example.com", "API.EXAMPLE.COM", "Api.Example.Com", "api.example.com.", "api.example.com..", "api.example.com.....",
		"api.example.com:8080", "api.example.com.:443", "api.example.com..:443", "api.example.com:", "ａｐｉ.ｅｘａｍｐｌｅ.ｃｏｍ",
		"api.example.com。", "api。example。com", "xn--bcher-kva.example", "XN--BCHER-KVA.EXAMPLE.", "bücher.example", "BÜCHER.example:8443",
		"bu\u0308cher.example", // NFD: the same name
	}
	malformed := []string{
		"", ":8080", ".", "api..example.com", ".api.example.com", "api.example.com:http", "api.example.com:99999",
		"api.example.com:80:80", "api%2eexample.com", "api.example.com/", "api example.com", "api.example.com\x00",
		"api_x.example.com", "[::1", "[fe80::1%25eth0]:80", "fd00::7", "user@api.example.com", "xn--.example", "api.example.com;x",
		strings.Repeat("a", 2000),
	}
	other := []string{"orders", "orders:8080", "orders.shop.svc.cluster.local", "10.0.0.7", "10.0.0.7:8080", "[fd00::7]:8080", "example.com", "www.api.example.com"}
	for _, tc := range []struct {
		name    string
		canon   func(string) (string, bool)
		correct bool
	}{
		{"canonicalHost", nil, true},
		{"before #26 (broken)", legacyHost, false},
		{"one trailing dot (broken)", oneDotHost, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, err := Compile(table, Options{hostCanon: tc.canon})
			if err != nil {
				t.Fatal(err)
			}
			var wrong []string
			for _, h := range same {
				if e, err := tbl.Match(h, "/orders/42", "PUT"); err != nil || e == nil || e.Name != "strict" {
					wrong = append(wrong, h)
				}
			}
			for _, h := range malformed {
				e, err := tbl.Match(h, "/orders/42", "PUT")
				if !errors.Is(err, ErrBadHost) {
					wrong = append(wrong, h)
					continue
				}
				if !tbl.Refuse(fencecheck.Input{Method: "PUT", Path: "/orders/42"}).Write || e != nil {
					t.Errorf("Host %q: the write is not refused", h)
				}
			}
			for _, h := range other {
				// Another name, or an address: the host-less entry (the
				// documented choice; `routes check` and `routes istio` warn
				// when this lets a client pick a weaker entry).
				if e, err := tbl.Match(h, "/orders/42", "PUT"); err != nil || e == nil || e.Name != "open" {
					t.Errorf("Host %q: %v, %v; want the host-less entry", h, e, err)
				}
			}
			if tc.correct && len(wrong) > 0 {
				t.Errorf("Hosts that did not select the strict entry or refuse: %q", wrong)
			}
			if !tc.correct && len(wrong) == 0 {
				t.Error("the broken Host reading was not caught")
			}
		})
	}
	// A table that names no host ignores the Host altogether: nothing to
	// choose between, so no request is refused for it.
	tbl, err := Compile([]config.Route{table[1]}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range malformed {
		if e, err := tbl.Match(h, "/orders/42", "PUT"); err != nil || e == nil {
			t.Errorf("host-less table, Host %q: %v, %v", h, e, err)
		}
	}
	// Table hosts are read the same way: an IDNA name in Unicode or xn--
	// form, any case, a trailing dot.
	for _, h := range []string{"BÜCHER.example.", "xn--bcher-kva.example"} {
		tbl, err := Compile([]config.Route{{Name: "a", Match: config.RouteMatch{Hosts: []string{h}}, Key: "a"}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if e, _ := tbl.Match("bücher.example", "/", "PUT"); e == nil {
			t.Errorf("table host %q does not govern bücher.example", h)
		}
	}
	for _, h := range []string{"api.example.com:80", "[::1]", "a b", "api..example.com", "*.*.example.com", "api.example.com\r"} {
		if _, err := Compile([]config.Route{{Name: "a", Match: config.RouteMatch{Hosts: []string{h}}, Key: "a"}}, Options{}); err == nil {
			t.Errorf("table host %q accepted", h)
		}
	}
}

// FuzzCanonicalHost: a Host canonicalHost reads as a name reads the same
// with a port, more trailing dots or upper case, and its canonical form is
// a fixed point (so a table host and a request host meet in one spelling).
func FuzzCanonicalHost(f *testing.F) {
	for _, h := range []string{"api.example.com", "API.example.com..", "bücher.example", "xn--bcher-kva.example", "ａｐｉ.example.com", "10.0.0.7", "[fd00::7]:80", "a。b", "ß.example", "İ.example"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		c, ok := canonicalHost(h)
		if !ok {
			return
		}
		if c2, ok := canonicalHost(c); !ok || c2 != c {
			t.Fatalf("%q → %q → %q, %v", h, c, c2, ok)
		}
		if strings.HasPrefix(h, "[") || strings.Contains(h, ":") {
			return
		}
		for _, v := range []string{h + ":8080", h + ".", h + "..:443"} {
			if c2, ok := canonicalHost(v); !ok || c2 != c {
				t.Errorf("%q → %q, but %q → %q, %v", h, c, v, c2, ok)
			}
		}
		if up := strings.ToUpper(h); !strings.ContainsFunc(up, func(r rune) bool { return r > 0x7f }) {
			if c2, ok := canonicalHost(up); !ok || c2 != c {
				t.Errorf("%q → %q, but %q → %q, %v", h, c, up, c2, ok)
			}
		}
	})
}
