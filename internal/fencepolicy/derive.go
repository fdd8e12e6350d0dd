// Package fencepolicy is `fencegate controller`: it reconciles FencePolicy
// objects (fencegate.io/v1alpha1), fencing attached to Gateway API
// HTTPRoutes (GEP-713 policy attachment). From each policy's target routes
// it derives route-table entries (the route's own hostnames and matches,
// the policy's options), publishes them in one ConfigMap the gateways
// include (config routesFile), emits the data-plane objects of the route's
// Gateway implementation (Envoy Gateway SecurityPolicy or
// EnvoyExtensionPolicy, Istio AuthorizationPolicy CUSTOM) owned by the
// policy, and writes a status that says Enforced only when it observed it:
// every emitted object Accepted by its own controller, every gateway
// replica serving the published entries.
//
// Imports: config, routes and deploy/mesh (plain generators) of ours;
// only cmd/fencegate imports it. No client-go: a small REST client (kube.go).
package fencepolicy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/routes"
)

// target is one resolved target of a policy: a route and the rules of it
// the policy covers.
type target struct {
	ref   TargetRef
	route *httpRoute
	rules []int // indexes into route.Spec.Rules
}

// EntryName names the table entry of a policy's match: what fence_route
// carries and audit events show.
func EntryName(ns, policy, route string, rule, match int) string {
	return fmt.Sprintf("%s%d/%d", entryPrefix(ns, policy, route), rule, match)
}

// entryPrefix starts the names of a policy's entries for one route.
func entryPrefix(ns, policy, route string) string {
	return fmt.Sprintf("fencepolicy:%s/%s:%s/", ns, policy, route)
}

// options are the policy's entry options as a config.Route (no name, no
// match).
func (s PolicySpec) options() (config.Route, error) {
	r := config.Route{Key: s.Key, KeyHeader: s.KeyHeader, FenceHeader: s.FenceHeader, Policy: s.Policy, Mode: s.Mode,
		Methods: s.Methods, Proof: s.Proof, Barrier: s.Barrier}
	for _, d := range []struct {
		name string
		src  string
		dst  *config.Duration
	}{{"maxWrite", s.MaxWrite, &r.MaxWrite}, {"maxWait", s.MaxWait, &r.MaxWait}} {
		if d.src == "" {
			continue
		}
		v, err := time.ParseDuration(d.src)
		if err != nil {
			return r, fmt.Errorf("%s: %w", d.name, err)
		}
		if v < time.Millisecond || v > 24*time.Hour {
			return r, fmt.Errorf("%s: %s is not between 1ms and 24h", d.name, d.src)
		}
		*d.dst = config.Duration(v)
	}
	return r, nil
}

// deriveEntries turns a policy's resolved targets into table entries: one
// per distinct (hostnames, path, method) of the covered rules' matches,
// each with the policy's options. The route is the source: a match the
// route gains is an entry at the next pass. A match the table cannot
// express is an error (the policy is Invalid): a RegularExpression path.
// Header and query matches narrow the route but not the entry (the entry
// governs every request with the route's host, path and method: wider,
// never narrower).
func deriveEntries(ns, policy string, spec PolicySpec, targets []target) ([]config.Route, error) {
	opts, err := spec.options()
	if err != nil {
		return nil, err
	}
	var out []config.Route
	seen := map[string]bool{}
	var errs []error
	for _, t := range targets {
		hosts := append([]string(nil), t.route.Spec.Hostnames...)
		for _, ri := range t.rules {
			matches := t.route.Spec.Rules[ri].Matches
			if len(matches) == 0 {
				matches = []routeMatch{{}} // the Gateway API's default: PathPrefix "/"
			}
			for mi, m := range matches {
				e := opts
				e.Name = EntryName(ns, policy, t.route.Metadata.Name, ri, mi)
				e.Match.Hosts = hosts
				typ, value := "PathPrefix", "/"
				if m.Path != nil {
					typ, value = m.Path.Type, m.Path.Value
					if typ == "" {
						typ = "PathPrefix"
					}
				}
				switch typ {
				case "Exact":
					e.Match.Path = config.RoutePath{Type: config.RoutePathExact, Value: value}
				case "PathPrefix":
					// The Gateway API's prefix is segment-wise and ignores a
					// trailing "/" ("/abc/" matches "/abc"), as the table's.
					if value != "/" {
						value = strings.TrimRight(value, "/")
					}
					e.Match.Path = config.RoutePath{Type: config.RoutePathPrefix, Value: value}
				default:
					errs = append(errs, fmt.Errorf("route %s rule %d match %d: a %s path match cannot be a route-table entry (use Exact or PathPrefix)", t.route.Metadata.Name, ri, mi, typ))
					continue
				}
				if m.Method != "" {
					e.Match.Methods = []string{m.Method}
				}
				k := fmt.Sprintf("%q %s %q %q", hosts, e.Match.Path.Type, e.Match.Path.Value, e.Match.Methods)
				if seen[k] {
					continue // the same request set again (a header/query variant): one entry
				}
				seen[k] = true
				out = append(out, e)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if _, err := routes.Compile(out, routes.Options{}); err != nil {
		return nil, err
	}
	return out, nil
}
