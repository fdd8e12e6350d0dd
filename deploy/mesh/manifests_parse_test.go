package mesh_test

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/mesh"
	"github.com/fencegate/fencegate/routes"
)

// generators are every generator in the package, by name.
var generators = []struct {
	name string
	gen  func([]config.Route, mesh.Options) ([]byte, error)
}{
	{"istio", mesh.Istio},
	{"istio meshconfig", func(_ []config.Route, o mesh.Options) ([]byte, error) { return mesh.IstioMeshConfig(o) }},
	{"gateway-api", mesh.GatewayAPI},
	{"envoy-gateway", mesh.EnvoyGateway},
	{"contour", mesh.Contour},
}

// yamlDocs parses a YAML stream strictly into its documents.
func yamlDocs(b []byte) ([]any, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	var out []any
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, doc)
	}
}

// loadable reports whether fencegate loads the table (the config's checks
// and the compiled table's, as `fencegate serve` and every `routes`
// command do).
func loadable(table []config.Route) bool {
	c := config.Default()
	c.Routes = table
	if c.ValidateRoutes() != nil {
		return false
	}
	_, err := routes.Compile(c.RouteTable(), routes.Options{})
	return err == nil
}

// manifestsHoldTheirObjects checks, for one table and options, that every
// generator's output parses (gopkg.in/yaml.v3) and holds exactly the
// objects it holds with its comments left out: no text from the table or
// the options, written into a comment, can end the comment and add,
// change or break an object. It returns how many outputs it checked.
func manifestsHoldTheirObjects(table []config.Route, o mesh.Options) (int, error) {
	checked := 0
	for _, g := range generators {
		out, err := g.gen(table, o)
		if err != nil {
			continue // a generator may refuse what its target cannot express
		}
		restore := mesh.SetComment(func(string) string { return "" })
		plain, perr := g.gen(table, o)
		restore()
		if perr != nil {
			return checked, fmt.Errorf("%s: without comments: %w", g.name, perr)
		}
		want, err := yamlDocs(plain)
		if err != nil || len(want) == 0 {
			return checked, fmt.Errorf("%s: the objects alone do not parse (%v)", g.name, err)
		}
		got, err := yamlDocs(out)
		if err != nil {
			return checked, fmt.Errorf("%s: the output does not parse: %w", g.name, err)
		}
		if !reflect.DeepEqual(got, want) {
			return checked, fmt.Errorf("%s: %d documents, want the %d objects it generated", g.name, len(got), len(want))
		}
		checked++
	}
	return checked, nil
}

// nastyText is text that could end a YAML comment or start a document.
func nastyText() []string {
	out := []string{"#", ": x", "\n---\nkind: Secret", "\\", "'\"", "\u00e9", "ａ", "\xff", "\ufeff", "\u2028", "\u2029", "\u0085", "\x7f"}
	for c := 0; c < 0x20; c++ {
		out = append(out, string(rune(c)))
	}
	for c := 0x80; c < 0xa0; c++ {
		out = append(out, string(rune(c)))
	}
	return out
}

// nastyTable puts text into one field of a table whose entries every
// generator takes.
func nastyTable(field, text string) ([]config.Route, mesh.Options) {
	r := config.Route{Name: "orders", Key: "orders/{2:int}",
		Match: config.RouteMatch{Hosts: []string{"api.example.com"}, Path: config.RoutePath{Type: "Template", Value: "/orders/{int}"}}}
	o := mesh.Options{Host: "api.example.com"}
	switch field {
	case "name":
		r.Name += text
	case "host":
		r.Match.Hosts[0] = "api" + text + ".example.com"
	case "template":
		r.Match.Path.Value = "/ord" + text + "ers/{int}"
	case "exact":
		r.Match.Path = config.RoutePath{Type: "Exact", Value: "/a" + text}
		r.Key = "a"
	case "key":
		r.Key = "orders" + text + "/{2:int}"
	case "provider":
		o.Provider = "fence" + text
	case "namespace":
		o.Namespace = "shop" + text
	case "gateway class":
		o.GatewayClass = "eg" + text
	}
	host := config.Route{Name: "open", Match: config.RouteMatch{Path: config.RoutePath{Value: "/public"}}, Policy: "off"}
	return []config.Route{r, host}, o
}

var nastyFields = []string{"name", "host", "template", "exact", "key", "provider", "namespace", "gateway class"}

// TestGeneratedManifestsParse: for every table fencegate loads with text
// that could end a comment in each field (every C0 and C1 control, DEL,
// U+2028/9, a BOM, invalid UTF-8, "#", "---"), and options carrying the
// same text, every generator's output parses and holds exactly its
// objects; the loader refuses the control characters. The comment writer
// before #26 (text written as it is) is caught.
func TestGeneratedManifestsParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		comment func(string) string
		correct bool
	}{
		{"escaping comment writer", mesh.Comment, true},
		{"comment writer before #26", mesh.OldComment, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore := mesh.SetComment(tc.comment)
			defer restore()
			var tables, refused, outputs int
			var failures []string
			for _, field := range nastyFields {
				for _, text := range nastyText() {
					table, o := nastyTable(field, text)
					inTable := field != "provider" && field != "namespace" && field != "gateway class"
					if !loadable(table) {
						refused++
						continue
					}
					if inTable && !config.Printable(text) {
						t.Errorf("the loader took %s %q", field, text)
					}
					tables++
					n, err := manifestsHoldTheirObjects(table, o)
					outputs += n
					if err != nil {
						failures = append(failures, fmt.Sprintf("%s %q: %v", field, text, err))
					}
				}
			}
			switch {
			case tc.correct && len(failures) > 0:
				t.Errorf("%d failures, e.g. %q", len(failures), failures[:min(5, len(failures))])
			case !tc.correct && len(failures) == 0:
				t.Errorf("the broken comment writer was not caught (%d tables, %d outputs)", tables, outputs)
			case tc.correct:
				t.Logf("%d tables loaded (%d refused), %d generator outputs parsed, each exactly its objects", tables, refused, outputs)
			default:
				t.Logf("caught: %d failures, e.g. %q", len(failures), failures[0])
			}
		})
	}
}

// FuzzGeneratedManifests: for any table fencegate loads, from fuzzed
// names, hosts, paths, keys and options, every generator's output parses
// and holds exactly its objects.
func FuzzGeneratedManifests(f *testing.F) {
	for _, field := range nastyFields {
		for _, text := range []string{"\r", "\u2028", "\n---\nkind: Secret", "#x"} {
			table, o := nastyTable(field, text)
			f.Add(table[0].Name, table[0].Match.Hosts[0], table[0].Match.Path.Type, table[0].Match.Path.Value, table[0].Key, o.Provider, o.Namespace)
		}
	}
	f.Fuzz(func(t *testing.T, name, host, typ, value, key, provider, namespace string) {
		r := config.Route{Name: name, Key: key, Match: config.RouteMatch{Path: config.RoutePath{Type: typ, Value: value}}}
		if host != "" {
			r.Match.Hosts = []string{host}
		}
		table := []config.Route{r}
		if !loadable(table) {
			return
		}
		if _, err := manifestsHoldTheirObjects(table, mesh.Options{Host: "api.example.com", Provider: provider, Namespace: namespace}); err != nil {
			t.Fatalf("%+v (provider %q, namespace %q): %v", r, provider, namespace, err)
		}
	})
}

// gatewayHostname is the Gateway API's Hostname pattern (CRD validation).
var gatewayHostname = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// TestGeneratorsEmitCanonicalHosts: a table host fencegate loads in any
// spelling (upper case, a trailing dot, Unicode IDNA) reaches the Gateway
// API's hostnames and Contour's fqdn as the name fencegate matches
// (lower-case ASCII, xn--, no dot), which the Gateway API's pattern takes;
// the hosts as written, lower-cased (the generators before #26), do not.
func TestGeneratorsEmitCanonicalHosts(t *testing.T) {
	hosts := []string{"API.Example.COM.", "BÜCHER.example", "*.Example.ORG"}
	table := []config.Route{{Name: "a", Key: "a", Match: config.RouteMatch{Hosts: hosts, Path: config.RoutePath{Value: "/a"}}}}
	if !loadable(table) {
		t.Fatal("the table does not load")
	}
	var got []string
	for _, gen := range []func([]config.Route, mesh.Options) ([]byte, error){mesh.GatewayAPI, mesh.Contour} {
		out, err := gen(table, mesh.Options{})
		if err != nil {
			t.Fatal(err)
		}
		docs, err := yamlDocs(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			m, _ := d.(map[string]any)
			spec, _ := m["spec"].(map[string]any)
			got = append(got, anyStrings(spec["hostnames"])...)
			got = append(got, anyStrings(spec["virtualhost"])...)
		}
	}
	want := []string{"api.example.com", "xn--bcher-kva.example", "*.example.org"}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("generated hosts %q lack %q", got, w)
		}
	}
	for _, h := range got {
		if !gatewayHostname.MatchString(h) {
			t.Errorf("generated host %q is not a Gateway API hostname", h)
		}
	}
	caught := false
	for _, h := range hosts {
		caught = caught || !gatewayHostname.MatchString(strings.ToLower(h))
	}
	if !caught {
		t.Error("the hosts as written, lower-cased, pass: the test cannot fail")
	}
}

// anyStrings are the strings in v: a list's, or a map's fqdn.
func anyStrings(v any) []string {
	var out []string
	switch v := v.(type) {
	case []any:
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
	case map[string]any:
		if f, ok := v["fqdn"].(string); ok {
			out = append(out, f)
		}
	}
	return out
}
