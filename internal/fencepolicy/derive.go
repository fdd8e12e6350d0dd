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
	"sort"
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
	// parents are the route's parentRefs whose Gateway's own controller
	// accepted the route: the only ones the policy configures.
	parents []parentRef
	// stale says which of them accepted an older generation of the route
	// only (its controller has not yet looked at the current spec): the
	// policy is not Enforced until it has.
	stale []string
	// hosts, when scoped, are the route's hostnames as its accepting
	// parents' listeners admit them (empty: any host); else the route's.
	hosts  []string
	scoped bool
}

// effectiveHosts are the hostnames a route takes traffic for through its
// accepted parents: each route hostname intersected with the hostname of
// each listener the parentRef selects (by sectionName, by port, or all),
// the Gateway API's rule ("*.example.com" admits "a.example.com"; a
// listener without a hostname admits every route hostname; a route
// without hostnames takes the listener's). nil means any host; ok false
// means no hostname is admitted (the route takes nothing).
func effectiveHosts(hr *httpRoute, parents []parentRef, gateways map[string]*gateway) (hosts []string, ok bool) {
	set := map[string]bool{}
	for _, pr := range parents {
		gns := hr.Metadata.Namespace
		if pr.Namespace != nil && *pr.Namespace != "" {
			gns = *pr.Namespace
		}
		gw := gateways[gns+"/"+pr.Name]
		if gw == nil {
			continue
		}
		for _, l := range gw.Spec.Listeners {
			if (pr.SectionName != nil && *pr.SectionName != l.Name) || (pr.Port != nil && *pr.Port != l.Port) {
				continue
			}
			lh := ""
			if l.Hostname != nil {
				lh = strings.ToLower(*l.Hostname)
			}
			if len(hr.Spec.Hostnames) == 0 {
				if lh == "" {
					return nil, true // any host
				}
				set[lh] = true
				continue
			}
			for _, h := range hr.Spec.Hostnames {
				if x := intersectHost(strings.ToLower(h), lh); x != "" {
					set[x] = true
				}
			}
		}
	}
	if len(set) == 0 {
		return nil, false
	}
	for h := range set {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	return hosts, true
}

// intersectHost is the more specific of a route hostname and a listener
// hostname when one admits the other, else "".
func intersectHost(route, listener string) string {
	covers := func(wild, h string) bool { // "*.x" covers "a.x", "*.a.x"
		suffix, ok := strings.CutPrefix(wild, "*")
		return ok && strings.HasSuffix(h, suffix) && len(h) > len(suffix)
	}
	switch {
	case listener == "" || route == listener:
		return route
	case covers(listener, route):
		return route
	case covers(route, listener):
		return listener
	}
	return ""
}

// acceptedParents are the parentRefs of hr that a Gateway's own
// controller (its GatewayClass's controllerName, never this controller's
// status entry) reports Accepted=True for, with an observedGeneration;
// why says, per other parentRef, why not, and stale which accepted only
// an older generation. A route no parent accepted takes no traffic: its
// hostnames and paths are only a claim, which any namespace can make, so
// deriving entries from it would let a tenant re-fence (or unfence)
// another team's host. An acceptance of an older generation still counts
// (the implementation keeps serving the route while it looks at the new
// spec; dropping the entries then would unfence every edit of a route)
// until its controller says otherwise for the current one.
func acceptedParents(hr *httpRoute, gateways map[string]*gateway, classes map[string]string) (ok []parentRef, why, stale []string) {
	ns := hr.Metadata.Namespace
	for _, pr := range hr.Spec.ParentRefs {
		if (pr.Group != nil && *pr.Group != "gateway.networking.k8s.io") || (pr.Kind != nil && *pr.Kind != "Gateway") {
			why = append(why, fmt.Sprintf("parent %s is not a Gateway", pr.Name))
			continue
		}
		gns := ns
		if pr.Namespace != nil && *pr.Namespace != "" {
			gns = *pr.Namespace
		}
		gw := gateways[gns+"/"+pr.Name]
		if gw == nil {
			why = append(why, fmt.Sprintf("Gateway %s/%s does not exist", gns, pr.Name))
			continue
		}
		impl := classes[gw.Spec.GatewayClassName]
		if impl == "" || impl == StatusControllerName {
			why = append(why, fmt.Sprintf("GatewayClass %q of Gateway %s/%s does not exist", gw.Spec.GatewayClassName, gns, pr.Name))
			continue
		}
		state := fmt.Sprintf("Gateway %s/%s (%s) has not reported it", gns, pr.Name, impl)
		accepted := false
		for _, st := range hr.Status.Parents {
			if st.ControllerName != impl || !sameParent(st.ParentRef, pr, ns) {
				continue
			}
			for _, cd := range st.Conditions {
				if cd.Type != "Accepted" {
					continue
				}
				switch {
				case cd.ObservedGeneration < 1:
					state = fmt.Sprintf("Gateway %s/%s's Accepted says no observedGeneration", gns, pr.Name)
				case cd.Status != "True":
					state = fmt.Sprintf("Gateway %s/%s: Accepted %s (%s)", gns, pr.Name, cd.Status, cd.Reason)
				default:
					accepted = true
					if cd.ObservedGeneration != hr.Metadata.Generation {
						stale = append(stale, fmt.Sprintf("Gateway %s/%s accepted HTTPRoute %s at generation %d; it is at %d", gns, pr.Name, hr.Metadata.Name, cd.ObservedGeneration, hr.Metadata.Generation))
					}
				}
			}
		}
		if accepted {
			ok = append(ok, pr)
		} else {
			why = append(why, state)
		}
	}
	return ok, why, stale
}

// sameParent compares two parentRefs with the Gateway API's defaults
// (group gateway.networking.k8s.io, kind Gateway, the route's namespace).
func sameParent(a, b parentRef, routeNS string) bool {
	norm := func(p parentRef) string {
		g, k, n, s, port := "gateway.networking.k8s.io", "Gateway", routeNS, "", 0
		if p.Group != nil {
			g = *p.Group
		}
		if p.Kind != nil {
			k = *p.Kind
		}
		if p.Namespace != nil && *p.Namespace != "" {
			n = *p.Namespace
		}
		if p.SectionName != nil {
			s = *p.SectionName
		}
		if p.Port != nil {
			port = *p.Port
		}
		return fmt.Sprintf("%s/%s/%s/%s/%s/%d", g, k, n, p.Name, s, port)
	}
	return norm(a) == norm(b)
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
		if t.scoped {
			hosts = append([]string(nil), t.hosts...)
		}
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
