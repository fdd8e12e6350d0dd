package fencepolicy

import (
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/mesh"
)

// Gateway implementations, by GatewayClass spec.controllerName.
const (
	ControllerEnvoyGateway = "gateway.envoyproxy.io/gatewayclass-controller"
	ControllerIstio        = "istio.io/gateway-controller"
)

// Labels on every emitted object: which controller manages it and which
// policy (by UID) it belongs to, so a pass finds its stale objects.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "fencegate-controller"
	LabelPolicy    = "fencegate.io/policy-uid"
)

// desiredChild is one object to emit.
type desiredChild struct {
	res  resource
	kind string
	obj  map[string]any
}

func (d desiredChild) key() string {
	md := d.obj["metadata"].(map[string]any)
	return d.res.plural + "/" + md["namespace"].(string) + "/" + md["name"].(string)
}

// childName is a DNS-1123 name for a policy's object for a target
// (≤ 253 characters).
func childName(policy string, ref TargetRef, suffix string) string {
	n := "fencepolicy-" + policy + "-" + ref.Name
	if ref.SectionName != "" {
		n += "-" + ref.SectionName
	}
	n += suffix
	if len(n) > 253 {
		n = n[:253]
	}
	return strings.TrimRight(n, "-.")
}

func (c *Controller) childMeta(p *FencePolicy, name, ns string) map[string]any {
	return map[string]any{
		"name":      name,
		"namespace": ns,
		"labels":    map[string]any{LabelManagedBy: ManagedBy, LabelPolicy: p.Metadata.UID},
		"ownerReferences": []any{map[string]any{
			"apiVersion": "fencegate.io/v1alpha1", "kind": "FencePolicy", "name": p.Metadata.Name, "uid": p.Metadata.UID, "controller": true,
		}},
	}
}

// envoyGatewayChild is the object making Envoy Gateway call fencegate on
// every request of the target: a SecurityPolicy (ext_authz over gRPC,
// fence_route naming the entry; fencegate trusts the name only from a
// caller with its client certificate, which the Gateway's EnvoyProxy
// presents, and otherwise matches the same entry by host, path and method),
// or for a barrier policy an EnvoyExtensionPolicy (ext_proc, which sees
// the response; Envoy Gateway passes no per-route metadata to it, so
// fencegate finds the entry by its table's match). Both fail closed.
func (c *Controller) envoyGatewayChild(p *FencePolicy, t target, entry string) desiredChild {
	ref := map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": t.ref.Name}
	if t.ref.SectionName != "" {
		ref["sectionName"] = t.ref.SectionName
	}
	backend := map[string]any{"name": c.opts.Service, "port": c.opts.ServicePort}
	if c.opts.ServiceNamespace != p.Metadata.Namespace {
		backend["namespace"] = c.opts.ServiceNamespace
	}
	if p.Spec.Barrier {
		return desiredChild{res: rExtensionPolicy, kind: "EnvoyExtensionPolicy", obj: map[string]any{
			"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyExtensionPolicy",
			"metadata": c.childMeta(p, childName(p.Metadata.Name, t.ref, "-extproc"), p.Metadata.Namespace),
			"spec": map[string]any{
				"targetRefs": []any{ref},
				"extProc": []any{map[string]any{
					"backendRefs":    []any{backend},
					"processingMode": map[string]any{"request": map[string]any{}, "response": map[string]any{}},
					"messageTimeout": "1s",
					"failOpen":       false,
				}},
			},
		}}
	}
	return desiredChild{res: rSecurityPolicy, kind: "SecurityPolicy", obj: map[string]any{
		"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "SecurityPolicy",
		"metadata": c.childMeta(p, childName(p.Metadata.Name, t.ref, ""), p.Metadata.Namespace),
		"spec": map[string]any{
			"targetRefs": []any{ref},
			"extAuth": map[string]any{
				"grpc":              map[string]any{"backendRefs": []any{backend}},
				"contextExtensions": []any{map[string]any{"name": mesh.RouteExtension, "type": "Value", "value": entry}},
				"timeout":           "250ms",
				"failOpen":          false,
				"statusOnError":     503,
			},
		},
	}}
}

// istioChild is an AuthorizationPolicy (CUSTOM, the fencegate provider)
// attached to the Gateway (targetRefs), whose rules cover the entries'
// hosts and paths: Istio passes no per-route context, so fencegate
// matches the request against the same entries itself. The rules never
// restrict by method: Istio compares methods case-sensitively and cannot
// see a method-override header (X-HTTP-Method-Override …) on a GET, both
// of which fencegate reads; every method on the hosts and paths goes to
// fencegate, which classifies. Nor do they restrict by a "*." wildcard
// host: Istio compares the Host header with its port, and "*.example.com"
// does not match "a.example.com:8443"; such a rule sends every host on its
// paths (wider, never narrower).
func (c *Controller) istioChild(p *FencePolicy, gw string, entries []config.Route) (desiredChild, error) {
	var rules []any
	for _, e := range entries {
		paths, _, err := mesh.IstioPaths(e.Match.Path)
		if err != nil {
			return desiredChild{}, err
		}
		op := map[string]any{}
		wildcard := false
		for _, h := range e.Match.Hosts {
			wildcard = wildcard || strings.HasPrefix(h, "*")
		}
		if hs := mesh.IstioHosts(e.Match.Hosts); len(hs) > 0 && !wildcard {
			op["hosts"] = toAny(hs)
		}
		if len(paths) > 0 {
			op["paths"] = toAny(paths)
		}
		rules = append(rules, map[string]any{"to": []any{map[string]any{"operation": op}}})
	}
	return desiredChild{res: rAuthorizationPolicy, kind: "AuthorizationPolicy", obj: map[string]any{
		"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
		"metadata": c.childMeta(p, childName(p.Metadata.Name, TargetRef{Name: gw}, "-istio"), p.Metadata.Namespace),
		"spec": map[string]any{
			"targetRefs": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw}},
			"action":     "CUSTOM",
			"provider":   map[string]any{"name": c.opts.IstioProvider},
			"rules":      rules,
		},
	}}, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// accepted says whether the implementation's controller accepted an
// emitted object at its current generation: every ancestor (Envoy
// Gateway) or its own Accepted condition (Istio) True, with
// observedGeneration equal to the object's generation (absent is not
// current). No status yet is not accepted.
func accepted(ch child) (bool, string) {
	gen := ch.Metadata.Generation
	check := func(conds []Condition, where string) (bool, string) {
		for _, cd := range conds {
			if cd.Type != "Accepted" {
				continue
			}
			// Only an observation of this generation counts: an absent
			// observedGeneration (0) or an older one may be an Accepted
			// about a previous spec.
			if cd.ObservedGeneration != gen {
				return false, fmt.Sprintf("%s: Accepted was observed at generation %d, the object is at %d", where, cd.ObservedGeneration, gen)
			}
			if cd.Status != "True" {
				return false, fmt.Sprintf("%s: Accepted %s (%s: %s)", where, cd.Status, cd.Reason, cd.Message)
			}
			return true, ""
		}
		return false, where + ": no Accepted condition yet"
	}
	if len(ch.Status.Ancestors) > 0 {
		for _, a := range ch.Status.Ancestors {
			if ok, why := check(a.Conditions, "ancestor "+string(a.AncestorRef)); !ok {
				return false, why
			}
		}
		return true, ""
	}
	if len(ch.Status.Conditions) > 0 {
		return check(ch.Status.Conditions, "status")
	}
	return false, "its controller has written no status yet"
}
