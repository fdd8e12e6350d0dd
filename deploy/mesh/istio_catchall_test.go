package mesh_test

import (
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/deploy/mesh"
)

// istioOp is an AuthorizationPolicy rule's operation as the policy
// carries it.
type istioOp struct {
	Hosts, Paths, Methods, NotMethods []string
}

// istioValueMatch is Istio's string match for hosts and paths: exact, or a
// single "*" as a whole prefix or suffix.
func istioValueMatch(patterns []string, v string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		switch {
		case p == "*", p == v:
			return true
		case strings.HasPrefix(p, "*") && strings.HasSuffix(v, p[1:]):
			return true
		case strings.HasSuffix(p, "*") && strings.HasPrefix(v, p[:len(p)-1]):
			return true
		}
	}
	return false
}

func (o istioOp) matches(host, path, method string) bool {
	return istioValueMatch(o.Hosts, host) && istioValueMatch(o.Paths, path) &&
		(len(o.Methods) == 0 || slices.Contains(o.Methods, method)) && !slices.Contains(o.NotMethods, method)
}

// TestIstioSendsEveryWriteOnTheTablesHosts: Istio compares paths exactly
// and case-sensitively, so writes fencegate's table refuses (another
// case, an encoded slash, a trailing slash, a trailing dot on the host)
// would pass unchecked unless the policy sends them. The generated
// policy's last rule sends every write on the table's hosts; the broken
// variant (the per-entry rules alone) lets them through.
func TestIstioSendsEveryWriteOnTheTablesHosts(t *testing.T) {
	out, err := mesh.Istio(shippedRoutes(t), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ops []istioOp
	dec := yaml.NewDecoder(strings.NewReader(string(out)))
	for {
		var doc struct {
			Kind string
			Spec struct {
				Rules []struct {
					To []struct{ Operation istioOp }
				}
			}
		}
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if doc.Kind != "AuthorizationPolicy" {
			continue
		}
		for _, r := range doc.Spec.Rules {
			for _, to := range r.To {
				ops = append(ops, to.Operation)
			}
		}
	}
	if len(ops) < 2 {
		t.Fatalf("no rules parsed from:\n%s", out)
	}
	writes := []struct{ host, method, path string }{
		{"api.example.com", "PUT", "/orders/42"},
		{"api.example.com", "PUT", "/Orders/42"},
		{"api.example.com", "PUT", "/orders%2F42"},
		{"api.example.com", "POST", "/checkout/"},
		{"API.example.com.", "DELETE", "/inventory/7"},
		{"api.example.com:8443", "PATCH", "/anything/else"},
	}
	for _, tc := range []struct {
		name    string
		ops     []istioOp
		correct bool
	}{
		{"generated", ops, true},
		{"per-entry rules only (broken)", ops[:len(ops)-1], false},
	} {
		var missed []string
		for _, w := range writes {
			host := strings.ToLower(w.host) // Istio lower-cases the authority
			sent := false
			for _, o := range tc.ops {
				sent = sent || o.matches(host, w.path, w.method)
			}
			if !sent {
				missed = append(missed, w.method+" "+w.host+w.path)
			}
		}
		if tc.correct && len(missed) > 0 {
			t.Errorf("%s: writes Istio would not send to fencegate: %v", tc.name, missed)
		}
		if !tc.correct && len(missed) == 0 {
			t.Errorf("%s: the broken policy was not caught", tc.name)
		}
	}
}
