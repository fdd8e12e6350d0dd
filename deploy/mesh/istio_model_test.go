package mesh_test

import (
	"fmt"
	"os"
	"path"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/mesh"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/routes"
)

// This file is an independent model of Istio's AuthorizationPolicy
// matching, as Istio documents it (security/v1 AuthorizationPolicy: Rule,
// Operation), and a test that the generated policy sends fencegate every
// request its table would govern or refuse as a write, whatever the
// request's Host, port, path spelling or method spelling.
//
// The documented matching the model implements:
//   - a CUSTOM policy sends a request when ANY rule matches; a policy
//     without rules matches nothing; an empty rule matches everything;
//   - a rule matches when one of its `to` operations matches (no `to`:
//     any operation); `from` and `when` are not modelled, so a policy
//     using them fails the test rather than being half-understood;
//   - an operation's fields are ANDed; an absent field allows anything;
//     a `not…` field refuses a value it matches;
//   - every string is Exact ("abc"), Prefix ("abc*"), Suffix ("*abc") or
//     Presence ("*": any non-empty value); hosts compare
//     case-insensitively, paths and methods exactly.
//
// A sidecar's inbound listener accepts any Host; Istio matches the path
// after its own normalization (BASE: RFC 3986 dot segments), so the model
// requires a request to be sent under both the raw and the normalized
// path.

// istioOperationModel is one operation: its fields by name.
type istioOperationModel map[string][]string

// istioConditionModel is one `when` condition on a request header.
type istioConditionModel struct {
	header            string
	values, notValues []string
}

// istioRuleModel is one rule: nil ops matches any operation; every when
// condition must hold too.
type istioRuleModel struct {
	ops  []istioOperationModel
	when []istioConditionModel
}

// istioPolicyModel parses the AuthorizationPolicy in a generated stream
// strictly: a field the model does not know is an error.
func istioPolicyModel(manifests []byte) ([]istioRuleModel, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(manifests)))
	var rules []istioRuleModel
	found := false
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err.Error() == "EOF" {
				break
			}
			return nil, err
		}
		if doc["kind"] != "AuthorizationPolicy" {
			continue
		}
		if found {
			return nil, fmt.Errorf("two AuthorizationPolicies")
		}
		found = true
		spec, _ := doc["spec"].(map[string]any)
		for k := range spec {
			switch k {
			case "selector", "action", "provider", "rules":
			default:
				return nil, fmt.Errorf("spec.%s: not modelled", k)
			}
		}
		if spec["action"] != "CUSTOM" {
			return nil, fmt.Errorf("action %v, want CUSTOM", spec["action"])
		}
		list, _ := spec["rules"].([]any)
		for i, r := range list {
			rm, ok := r.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("rules[%d]: %T", i, r)
			}
			var rule istioRuleModel
			for k, v := range rm {
				if k == "when" {
					conds, _ := v.([]any)
					for j, c := range conds {
						cm, _ := c.(map[string]any)
						key, _ := cm["key"].(string)
						name, ok := strings.CutPrefix(key, "request.headers[")
						name, ok2 := strings.CutSuffix(name, "]")
						if !ok || !ok2 || name == "" {
							return nil, fmt.Errorf("rules[%d].when[%d]: key %q not modelled", i, j, key)
						}
						cond := istioConditionModel{header: name}
						for f, vals := range cm {
							l, _ := vals.([]any)
							switch f {
							case "key":
							case "values", "notValues":
								for _, x := range l {
									if f == "values" {
										cond.values = append(cond.values, fmt.Sprint(x))
									} else {
										cond.notValues = append(cond.notValues, fmt.Sprint(x))
									}
								}
							default:
								return nil, fmt.Errorf("rules[%d].when[%d].%s: not modelled", i, j, f)
							}
						}
						if len(cond.values) == 0 && len(cond.notValues) == 0 {
							return nil, fmt.Errorf("rules[%d].when[%d]: neither values nor notValues", i, j)
						}
						rule.when = append(rule.when, cond)
					}
					continue
				}
				if k != "to" {
					return nil, fmt.Errorf("rules[%d].%s: not modelled", i, k)
				}
				tos, _ := v.([]any)
				for j, to := range tos {
					tm, _ := to.(map[string]any)
					om, _ := tm["operation"].(map[string]any)
					if len(tm) != 1 || om == nil {
						return nil, fmt.Errorf("rules[%d].to[%d]: want one operation", i, j)
					}
					op := istioOperationModel{}
					for f, vals := range om {
						switch f {
						case "hosts", "notHosts", "paths", "notPaths", "methods", "notMethods":
						default:
							return nil, fmt.Errorf("rules[%d].to[%d].operation.%s: not modelled", i, j, f)
						}
						l, _ := vals.([]any)
						for _, s := range l {
							op[f] = append(op[f], fmt.Sprint(s))
						}
					}
					rule.ops = append(rule.ops, op)
				}
			}
			rules = append(rules, rule)
		}
	}
	if !found {
		return nil, fmt.Errorf("no AuthorizationPolicy")
	}
	return rules, nil
}

// istioStringMatch is Istio's string match: exact, "abc*", "*abc", "*".
func istioStringMatch(pattern, v string, fold bool) bool {
	if fold {
		pattern, v = strings.ToLower(pattern), strings.ToLower(v)
	}
	switch {
	case pattern == "*":
		return v != ""
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(v, pattern[:len(pattern)-1])
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(v, pattern[1:])
	}
	return pattern == v
}

func istioAny(patterns []string, v string, fold bool) bool {
	for _, p := range patterns {
		if istioStringMatch(p, v, fold) {
			return true
		}
	}
	return false
}

func (o istioOperationModel) matches(host, p, method string) bool {
	field := func(pos, neg, v string, fold bool) bool {
		if ps, ok := o[pos]; ok && !istioAny(ps, v, fold) {
			return false
		}
		return !istioAny(o[neg], v, fold)
	}
	return field("hosts", "notHosts", host, true) && field("paths", "notPaths", p, false) && field("methods", "notMethods", method, false)
}

// holds reports whether the condition holds for the request's headers
// (names compared case-insensitively, as HTTP does; "_" is not "-").
func (c istioConditionModel) holds(header map[string]string) bool {
	v := ""
	for name, val := range header {
		if strings.EqualFold(name, c.header) {
			v = val
		}
	}
	if len(c.values) > 0 && !istioAny(c.values, v, false) {
		return false
	}
	return !istioAny(c.notValues, v, false)
}

// istioSends reports whether the policy sends the request to the provider.
func istioSends(rules []istioRuleModel, host, p, method string, header map[string]string) bool {
	for _, r := range rules {
		ok := r.ops == nil
		for _, o := range r.ops {
			ok = ok || o.matches(host, p, method)
		}
		for _, c := range r.when {
			ok = ok && c.holds(header)
		}
		if ok {
			return true
		}
	}
	return false
}

// istioNormalized is the path Istio's BASE normalization hands its
// matcher: the query cut, dot segments resolved (a trailing "/" kept).
func istioNormalized(target string) string {
	p, _, _ := strings.Cut(target, "?")
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// fencegateWrite reports whether fencegate's table governs the request as
// a write, or refuses it as one (a path it cannot route to one entry, a
// write no entry governs).
func fencegateWrite(t *routes.Table, host, target, method string) bool {
	e, err := t.Match(host, target, method)
	switch {
	case err != nil:
		return t.Refuse(fencecheck.Input{Method: method, Path: target}).Write
	case e != nil:
		return e.Route.Methods.IsWrite(method)
	}
	return t.NoRoute().Methods.IsWrite(method)
}

// Spellings the coverage test enumerates.
var (
	modelHosts = []string{
		"api.example.com", "API.Example.COM", "api.example.com.", "api.example.com..", "api.example.com:8080",
		"api.example.com.:443", "api.example.com:", "orders", "orders:8080", "orders.shop", "orders.shop.svc",
		"orders.shop.svc.cluster.local", "orders.shop.svc.cluster.local:8080", "10.0.0.7", "10.0.0.7:8080",
		"[fd00::7]:8080", "[fd00::7]", "localhost", "127.0.0.6:15006", "xn--api-example-com", "bücher.example.com",
		"xn--bcher-kva.example.com", "www.example.org", "example.org", "ｅxample.org", "", "*", "evil.com",
	}
	modelMethods = []string{
		"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "TRACE",
		"get", "Get", "head", "options", "post", "put", "patch", "delete", "Delete", "dElEtE", "PoSt",
		"PROPFIND", "MKCOL", "BREW", "X",
	}
	modelFixedPaths = []string{
		"/", "/RPC/x", "/rpc./x", "/rpc/x", "/Rpc/x", "/%61dmin", "/admin", "/Admin", "/anything/else",
		"//orders/42", "/orders/42/../../admin", "/a;b", "/%2e%2e/orders/42",
	}
)

// pathSpellings are the ways a client may spell p.
func pathSpellings(p string) []string {
	out := []string{p, strings.ToUpper(p), p + "/", p + ".", p + "/.", p + ";v=1", p + "?q=1", "/x/.." + p,
		strings.Replace(p, "/", "//", 1), strings.ReplaceAll(p, "/", "/./")}
	if len(p) > 1 {
		out = append(out, "/"+strings.ToUpper(p[1:2])+p[2:], fmt.Sprintf("/%%%02X", p[1])+p[2:])
	}
	if i := strings.LastIndex(p, "/"); i > 0 {
		out = append(out, p[:i]+"%2F"+p[i+1:], p[:i]+"%2f"+p[i+1:])
	}
	return out
}

// concretePath is a path an entry's match governs.
func concretePath(rp config.RoutePath) string {
	if rp.Value == "" {
		return "/"
	}
	r := strings.NewReplacer("{int}", "42", "{uuid}", "6f1c2a9e-3b4d-4c5e-8f90-1a2b3c4d5e6f", "*", "x")
	return r.Replace(rp.Value)
}

// coverage enumerates requests against table and the policy gen makes for
// it: how many there were, how many fencegate governs or refuses as
// writes, and the writes the policy does not send.
func coverage(t *testing.T, table []config.Route, gen func([]config.Route, mesh.Options) ([]byte, error)) (requests, writes int, missed []string) {
	t.Helper()
	tbl, err := routes.Compile(table, routes.Options{})
	if err != nil {
		t.Fatalf("the table does not compile: %v", err)
	}
	out, err := gen(table, mesh.ShippedOptions)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := istioPolicyModel(out)
	if err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	paths := map[string]bool{}
	for _, p := range modelFixedPaths {
		paths[p] = true
	}
	for _, r := range table {
		for _, p := range pathSpellings(concretePath(r.Match.Path)) {
			paths[p] = true
		}
	}
	for _, host := range modelHosts {
		for target := range paths {
			for _, method := range modelMethods {
				requests++
				if !fencegateWrite(tbl, host, target, method) {
					continue
				}
				writes++
				raw, _, _ := strings.Cut(target, "?")
				if !istioSends(rules, host, raw, method, nil) || !istioSends(rules, host, istioNormalized(target), method, nil) {
					missed = append(missed, fmt.Sprintf("%s %s (Host %q)", method, target, host))
				}
			}
		}
	}
	return requests, writes, missed
}

func loadTable(t *testing.T, yamlText string) []config.Route {
	t.Helper()
	c := config.Default()
	if err := c.LoadBytes("table", []byte(yamlText)); err != nil {
		t.Fatal(err)
	}
	if err := c.ValidateRoutes(); err != nil {
		t.Fatal(err)
	}
	return c.Routes
}

func readmeTable(t *testing.T) []config.Route {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Behind Istio")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no yaml block under \"## Behind Istio\"")
	}
	return loadTable(t, block)
}

// mixedTable has host-scoped and host-less entries, an entry that writes
// with GET (methods "*") on a host and a wildcard, and a literal "%61".
const mixedTable = `
routes:
  - name: orders
    match:
      hosts: [api.example.com]
      path: {type: Template, value: "/orders/{int}"}
      methods: [POST, PUT, PATCH, DELETE]
    key: "orders/{2:int}"
    proof: signed
  - name: open
    match: {path: {value: /public}}
    policy: "off"
  - name: rpc
    match:
      hosts: [api.example.com, "*.example.org"]
      path: {value: /rpc}
    methods: "*"
    key: rpc
  - name: admin
    match: {path: {type: Exact, value: "/%61dmin"}}
    key: admin
`

// choiceTable: a strict host-scoped entry beside a host-less policy: off
// one over every path (the table item 2 of #26 starts from).
const choiceTable = `
routes:
  - name: orders
    match:
      hosts: [api.example.com]
      path: {type: Template, value: "/orders/{int}"}
      methods: [POST, PUT, PATCH, DELETE]
    key: "orders/{2:int}"
    proof: signed
  - name: open
    match: {path: {value: /}}
    policy: "off"
`

// rpcTable: one host-less entry that writes with every method.
const rpcTable = `
routes:
  - name: rpc
    match: {path: {value: /RPC}}
    methods: "GET,POST"
    key: rpc
`

// TestIstioSendsEveryWrite: for the shipped table, the README's, a table
// mixing host-scoped and host-less entries and one whose entry writes
// with GET, every request fencegate governs or refuses as a write — in
// every enumerated Host, path and method spelling — is sent to fencegate
// by the generated policy under the model of Istio's matching. The
// generator before #26 (rules scoped to the table's hosts and paths) and
// one that ignores entries writing with GET are caught.
func TestIstioSendsEveryWrite(t *testing.T) {
	tables := []struct {
		name  string
		table func(*testing.T) []config.Route
	}{
		{"shipped", shippedRoutes},
		{"README", readmeTable},
		{"mixed", func(t *testing.T) []config.Route { return loadTable(t, mixedTable) }},
		{"GET writes", func(t *testing.T) []config.Route { return loadTable(t, rpcTable) }},
		{"host choice", func(t *testing.T) []config.Route { return loadTable(t, choiceTable) }},
	}
	gens := []struct {
		name   string
		gen    func([]config.Route, mesh.Options) ([]byte, error)
		broken map[string]bool // the tables the broken generator must fail
	}{
		{"generated", mesh.Istio, nil},
		{"host-scoped (before #26)", mesh.HostScopedIstio, map[string]bool{"shipped": true, "README": true, "mixed": true, "GET writes": true}},
		{"reads fixed at GET, HEAD, OPTIONS", mesh.FixedReadsIstio, map[string]bool{"mixed": true, "GET writes": true}},
	}
	for _, tb := range tables {
		for _, g := range gens {
			t.Run(tb.name+"/"+g.name, func(t *testing.T) {
				requests, writes, missed := coverage(t, tb.table(t), g.gen)
				if writes == 0 || writes == requests {
					t.Fatalf("%d requests, %d writes: the enumeration proves nothing", requests, writes)
				}
				switch {
				case g.broken == nil && len(missed) > 0:
					t.Errorf("%d of %d writes (%d requests) Istio would not send to fencegate, e.g. %q", len(missed), writes, requests, missed[:min(8, len(missed))])
				case g.broken[tb.name] && len(missed) == 0:
					t.Errorf("the broken generator was not caught (%d writes of %d requests all sent)", writes, requests)
				case g.broken == nil:
					t.Logf("%d requests, %d writes, all sent", requests, writes)
				case len(missed) > 0:
					t.Logf("caught: %d of %d writes not sent, e.g. %q", len(missed), writes, missed[:min(3, len(missed))])
				}
			})
		}
	}
}

// TestIstioModel pins the model to Istio's documented examples, so a
// model that matched everything (or nothing) could not pass the coverage
// test vacuously.
func TestIstioModel(t *testing.T) {
	op := istioOperationModel{"hosts": {"*.example.com"}, "methods": {"GET", "HEAD"}, "notPaths": {"/admin*"}}
	for _, c := range []struct {
		host, path, method string
		want               bool
	}{
		{"www.EXAMPLE.com", "/x", "GET", true},
		{"www.example.com", "/admin/x", "GET", false},
		{"www.example.com", "/x", "get", false}, // methods compare exactly
		{"www.example.com", "/x", "POST", false},
		{"example.org", "/x", "GET", false},
	} {
		if got := op.matches(c.host, c.path, c.method); got != c.want {
			t.Errorf("%+v: %v, want %v", c, got, c.want)
		}
	}
	if istioSends(nil, "h", "/", "PUT", nil) {
		t.Error("a policy without rules sent a request")
	}
	if !istioSends([]istioRuleModel{{}}, "h", "/", "PUT", nil) {
		t.Error("an empty rule did not match")
	}
	when := []istioRuleModel{{when: []istioConditionModel{{header: "x-a", values: []string{"*"}}}}}
	if !istioSends(when, "h", "/", "GET", map[string]string{"X-A": "1"}) || istioSends(when, "h", "/", "GET", map[string]string{"x_a": "1"}) ||
		istioSends(when, "h", "/", "GET", map[string]string{"X-A": ""}) {
		t.Error("a when condition on a header: presence, case or underscore wrong")
	}
	if istioStringMatch("*", "", false) || !istioStringMatch("abc*", "abc", false) || !istioStringMatch("*abc", "xabc", false) {
		t.Error("string match: presence, prefix or suffix wrong")
	}
	if _, err := istioPolicyModel([]byte("kind: AuthorizationPolicy\nspec:\n  action: CUSTOM\n  rules:\n    - to:\n        - operation:\n            ports: [\"80\"]\n")); err == nil {
		t.Error("a field the model does not know was accepted")
	}
}

// TestIstioSendsMethodOverrides: a request carrying a method-override
// header, in any spelling of its name, any method, host and path, is sent
// to fencegate (a framework may run it as a DELETE); the policy without
// its header rules (the broken variant) lets a GET carrying one through.
func TestIstioSendsMethodOverrides(t *testing.T) {
	out, err := mesh.Istio(shippedRoutes(t), mesh.ShippedOptions)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := istioPolicyModel(out)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"X-HTTP-Method-Override", "x-http-method-override", "X-HTTP-Method", "X-Method-Override",
		"X_HTTP_METHOD_OVERRIDE", "x_http_method", "X_Method_Override"}
	for _, tc := range []struct {
		name    string
		rules   []istioRuleModel
		correct bool
	}{{"generated", rules, true}, {"without the header rules (broken)", rules[:1], false}} {
		sent, missed := 0, []string{}
		for _, host := range modelHosts {
			for _, p := range []string{"/orders/42", "/Orders/42", "/anything"} {
				for _, method := range modelMethods {
					for _, name := range names {
						if istioSends(tc.rules, host, p, method, map[string]string{name: "DELETE"}) {
							sent++
						} else {
							missed = append(missed, fmt.Sprintf("%s %s %s: DELETE (Host %q)", method, p, name, host))
						}
					}
				}
			}
		}
		if tc.correct && len(missed) > 0 {
			t.Errorf("%s: %d not sent, e.g. %q", tc.name, len(missed), missed[:min(5, len(missed))])
		}
		if !tc.correct && len(missed) == 0 {
			t.Errorf("%s: not caught", tc.name)
		}
		if tc.correct {
			t.Logf("%d requests with a method-override header, all sent", sent)
		}
	}
}
