package config

import (
	"strings"
	"testing"
)

// TestRouteTextRefusesControlCharacters: a route table whose text holds a
// character no client sends in a host, path or method, and that a YAML
// parser may read as a line break (a raw CR in a Template literal, #26),
// does not load; ordinary text, UTF-8 included, does. A checker that
// looks only at C0 controls (the broken variant) misses NEL, DEL,
// U+2028, a BOM and invalid UTF-8.
func TestRouteTextRefusesControlCharacters(t *testing.T) {
	bad := []string{`\r`, `\n`, `\0`, `\t`, `\x7f`, `\x85`, `\u2028`, `\u2029`, `\ufeff`, `\x1b`}
	good := []string{`a`, `é`, `ｏ`, `-`}
	onlyC0 := func(s string) bool { return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 }) }
	for _, tc := range []struct {
		name      string
		printable func(string) bool
		correct   bool
	}{{"Printable", Printable, true}, {"C0 only (broken)", onlyC0, false}} {
		missed := 0
		for _, e := range bad {
			for _, field := range []string{"path: {type: Template, value: \"/ord%sers/{int}\"}", "hosts: [\"api%s.example.com\"]", "methods: [\"PU%sT\"]"} {
				doc := "routes:\n  - name: orders\n    key: \"orders/{2:int}\"\n    match: {" + strings.Replace(field, "%s", e, 1) + "}\n"
				c := Default()
				if err := c.LoadBytes("t.yaml", []byte(doc)); err != nil {
					t.Fatalf("%s: %v", doc, err)
				}
				value := c.Routes[0].Match.Path.Value + strings.Join(c.Routes[0].Match.Hosts, "") + strings.Join(c.Routes[0].Match.Methods, "")
				if tc.printable(value) {
					missed++
				}
				if tc.correct {
					err := c.ValidateRoutes()
					if err == nil || !strings.Contains(err.Error(), "control character") {
						t.Errorf("loaded %q: %v", doc, err)
					}
				}
			}
		}
		if tc.correct && missed > 0 {
			t.Errorf("%s: %d control characters taken", tc.name, missed)
		}
		if !tc.correct && missed == 0 {
			t.Errorf("%s: the broken checker was not caught", tc.name)
		}
	}
	for _, g := range good {
		c := Default()
		doc := "routes:\n  - name: orders\n    key: \"orders/{2:int}\"\n    match: {path: {type: Template, value: \"/ord" + g + "ers/{int}\"}}\n"
		if err := c.LoadBytes("t.yaml", []byte(doc)); err != nil {
			t.Fatal(err)
		}
		if err := c.ValidateRoutes(); err != nil {
			t.Errorf("%q refused: %v", g, err)
		}
	}
	if Printable("\xff") {
		t.Error("invalid UTF-8 taken")
	}
}
