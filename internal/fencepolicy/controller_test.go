package fencepolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/e2e/kube"
	"github.com/fencegate/fencegate/routes"
	"gopkg.in/yaml.v3"
)

// TestFencePolicy runs every case against one real kube-apiserver with the
// real Gateway API, Envoy Gateway and Istio CRDs and the shipped
// FencePolicy CRD, and a real `fencegate serve` including the published
// entries. It fails, never skips, without the binaries or the modules.
func TestFencePolicy(t *testing.T) {
	start := time.Now()
	e := getEnv(t)
	t.Logf("API server with the CRDs ready in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := e.startGateway(t, ctx)
	e.playGatewayControllers(ctx)

	t.Run("CRD admission", func(t *testing.T) { testCRD(t, e) })
	t.Run("lifecycle", func(t *testing.T) { testLifecycle(t, e, g) })
	t.Run("resolution", func(t *testing.T) { testResolution(t, e, g) })
	t.Run("istio", func(t *testing.T) { testIstio(t, e, g) })
	t.Run("broken: Enforced before the child is accepted", func(t *testing.T) {
		if err := scenarioEnforcedOnlyWhenObserved(t, e, g, "early-good", nil); err != nil {
			t.Fatalf("the controller: %v", err)
		}
		err := scenarioEnforcedOnlyWhenObserved(t, e, g, "early-broken", func(o *Options) { o.brokenEarlyEnforced = true })
		if err == nil {
			t.Fatal("the scenario passed a controller that claims Enforced before observing it")
		}
		t.Logf("caught: %v", err)
	})
	t.Run("broken: entries from the policy, not the route", func(t *testing.T) {
		if err := scenarioEntriesFromRoute(t, e, g, "route-good", nil); err != nil {
			t.Fatalf("the controller: %v", err)
		}
		err := scenarioEntriesFromRoute(t, e, g, "route-broken", func(o *Options) { o.brokenFromPolicy = true })
		if err == nil {
			t.Fatal("the scenario passed a controller that derives entries from the policy alone")
		}
		t.Logf("caught: %v", err)
	})
	t.Run("broken: entries from a route no Gateway accepted", func(t *testing.T) {
		if err := scenarioUnacceptedTarget(t, e, g, "squat-good", nil); err != nil {
			t.Fatalf("the controller: %v", err)
		}
		err := scenarioUnacceptedTarget(t, e, g, "squat-broken", func(o *Options) { o.brokenAnyParent = true })
		if err == nil {
			t.Fatal("the scenario passed a controller that derives entries from a route no Gateway accepted")
		}
		t.Logf("caught: %v", err)
	})
	t.Run("broken: proof: signed published to gateways with no key", func(t *testing.T) {
		if err := scenarioProofWithoutKey(t, e, g, "proof-good", nil); err != nil {
			t.Fatalf("the controller: %v", err)
		}
		// A controller that does not know (or is told wrongly) that the
		// gateways have a key publishes it: the scenario must say so.
		err := scenarioProofWithoutKey(t, e, g, "proof-broken", func(o *Options) { o.ProofSigning = true })
		if err == nil {
			t.Fatal("the scenario passed a controller that publishes proof: signed to gateways with no key")
		}
		t.Logf("caught: %v", err)
	})
	t.Run("RBAC", func(t *testing.T) { testRBAC(t, e, g) })
	t.Logf("whole run %v", time.Since(start).Round(time.Millisecond))
}

// waitFor polls cond every 50 ms for at most bound; the error says what
// was awaited and the last state.
func waitFor(bound time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(bound)
	var last string
	for {
		ok, state := cond()
		if ok {
			return nil
		}
		last = state
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v (last: %s)", what, bound, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func condIs(e *env, t *testing.T, ns, name, typ, status, reason string) func() (bool, string) {
	return func() (bool, string) {
		c := e.condition(t, ns, name, typ)
		return c.Status == status && (reason == "" || c.Reason == reason), fmt.Sprintf("%s=%s %s: %s", typ, c.Status, c.Reason, c.Message)
	}
}

// publishedEntries are the entries in the ConfigMap.
func publishedEntries(t *testing.T, e *env) []config.Route {
	t.Helper()
	cm := e.get(t, rConfigMap, "fencegate", "fencegate-policy-routes")
	if cm == nil {
		return nil
	}
	var f struct {
		Routes []config.Route `yaml:"routes"`
	}
	data, _ := cm["data"].(map[string]any)
	s, _ := data[RoutesFileKey].(string)
	if err := yaml.Unmarshal([]byte(s), &f); err != nil {
		t.Fatal(err)
	}
	return f.Routes
}

// servedTable is the table the gateway serves, when it serves what the
// ConfigMap holds: the published file compiled as the gateway does.
func servedTable(t *testing.T, e *env, g *gatewayProc) (*routes.Table, bool) {
	t.Helper()
	b, err := os.ReadFile(g.file)
	if err != nil || FileHash(b) != g.served() {
		return nil, false
	}
	c := config.Config{RoutesFile: g.file}
	if err := c.IncludeRoutesFile(); err != nil || c.RoutesFileSum != g.served() {
		return nil, false
	}
	tbl, err := routes.Compile(c.Routes, routes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tbl, true
}

// governs: the served table's entry for a request is one of policy's.
func governs(t *testing.T, e *env, g *gatewayProc, ns, policy, host, path, method string) (bool, string) {
	tbl, ok := servedTable(t, e, g)
	if !ok {
		return false, "the gateway does not serve the published file yet"
	}
	en, err := tbl.Match(host, path, method)
	if err != nil || en == nil {
		return false, fmt.Sprintf("%s %s%s: no entry (%v)", method, host, path, err)
	}
	return strings.HasPrefix(en.Name, "fencepolicy:"+ns+"/"+policy+":"), method + " " + host + path + " → " + en.Name
}

func testCRD(t *testing.T, e *env) {
	good := `
apiVersion: fencegate.io/v1alpha1
kind: FencePolicy
metadata: {name: crd-good, namespace: shop}
spec:
  targetRefs:
    - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: orders, sectionName: write}
    - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: carts}
  key: "orders/{2:int}/{4:uuid}"
  policy: latest
  mode: enforce
  methods: "POST, PUT,+PROPFIND"
  proof: signed
  barrier: true
  maxWrite: 30s
  maxWait: 1500ms
`
	if _, err := e.a.Apply(admin, e.res, []byte(good), true); err != nil {
		t.Fatalf("a valid policy was refused: %v", err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"no targetRefs", "  targetRefs:\n    - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: orders, sectionName: write}\n    - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: carts}\n", "  targetRefs: []\n", "targetRefs"},
		{"a Service target", "kind: HTTPRoute, name: carts", "kind: Service, name: carts", "kind"},
		{"another group", "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: carts}", "{group: networking.k8s.io, kind: HTTPRoute, name: carts}", "group"},
		{"a target twice", "name: carts}", "name: orders, sectionName: write}", "at most once"},
		{"a section name with capitals", "sectionName: write", "sectionName: Write", "sectionName"},
		{"an unclosed placeholder", `key: "orders/{2:int}/{4:uuid}"`, `key: "orders/{2:int"`, "placeholders"},
		{"segment 0", `key: "orders/{2:int}/{4:uuid}"`, `key: "orders/{0}"`, "placeholders"},
		{"segment 256", `key: "orders/{2:int}/{4:uuid}"`, `key: "orders/{256}"`, "255"},
		{"an unknown segment type", `key: "orders/{2:int}/{4:uuid}"`, `key: "orders/{2:float}"`, "placeholders"},
		{"key and keyHeader", "  policy: latest\n", "  policy: latest\n  keyHeader: x-key\n", "exclude"},
		{"an unknown policy", "policy: latest", "policy: newest", "policy"},
		{"an unknown mode", "mode: enforce", "mode: block", "mode"},
		{"an unknown proof", "proof: signed", "proof: jwt", "proof"},
		{"methods with a slash", `methods: "POST, PUT,+PROPFIND"`, `methods: "POST/PUT"`, "methods"},
		{"maxWrite without barrier", "  barrier: true\n", "", "maxWrite"},
		{"maxWrite not a duration", "maxWrite: 30s", "maxWrite: 30 seconds", "maxWrite"},
		{"maxWait not a duration", "maxWait: 1500ms", "maxWait: soon", "maxWait"},
		{"a barrier with policy off", "policy: latest", `policy: "off"`, "barrier"},
		{"an unknown field", "  proof: signed\n", "  proof: signed\n  proofs: signed\n", "proofs"},
		{"a header name with a space", "  policy: latest\n", "  policy: latest\n  fenceHeader: x fence\n", "fenceHeader"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			broken := strings.Replace(good, tc.from, tc.to, 1)
			if broken == good {
				t.Fatalf("%q is not in the good policy", tc.from)
			}
			_, err := e.a.Apply(admin, e.res, []byte(broken), true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want it refused naming %q; got %v", tc.want, err)
			}
		})
	}
	// The printer columns the CRD declares are what kubectl shows.
	raw := e.get(t, resource{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false}, "", "fencepolicies.fencegate.io")
	b, _ := json.Marshal(raw)
	for _, col := range []string{`"name":"Accepted"`, `"name":"Enforced"`, `"name":"Route"`, `"gateway.networking.k8s.io/policy":"direct"`} {
		if !strings.Contains(string(b), col) {
			t.Errorf("the installed CRD lacks %s", col)
		}
	}
}

const ordersRoute = `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: eg}]
  hostnames: [shop.example.com]
  rules:
    - name: write
      matches:
        - path: {type: PathPrefix, value: /orders}
      backendRefs: [{name: orders, port: 80}]
    - name: health
      matches:
        - path: {type: Exact, value: /health}
      backendRefs: [{name: orders, port: 80}]
`

const ordersPolicy = `
apiVersion: fencegate.io/v1alpha1
kind: FencePolicy
metadata: {name: orders, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: orders, sectionName: write}]
  key: "orders/{2:int}"
`

func testLifecycle(t *testing.T, e *env, g *gatewayProc) {
	_, stop := e.startController(t, g, nil)
	e.apply(t, ordersRoute)
	e.apply(t, ordersPolicy)
	must(t, waitFor(10*time.Second, "orders Accepted", condIs(e, t, "shop", "orders", CondAccepted, "True", ReasonAccepted)))

	// The SecurityPolicy: owned by the policy, naming the entry, strict.
	spName := "fencepolicy-orders-orders-write"
	var sp map[string]any
	must(t, waitFor(10*time.Second, "the SecurityPolicy", func() (bool, string) {
		sp = e.getQuiet(rSecurityPolicy, "shop", spName)
		return sp != nil, "absent"
	}))
	b, _ := json.Marshal(sp)
	for _, want := range []string{`"kind":"FencePolicy"`, `"controller":true`, `"name":"fence_route"`, `"value":"fencepolicy:shop/orders:orders/0/0"`, `"sectionName":"write"`, `"statusOnError":503`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the SecurityPolicy lacks %s: %s", want, b)
		}
	}
	strictDryRun(t, e, sp)

	// Enforced stays False while nothing accepted the SecurityPolicy, even
	// once the gateway serves the entries.
	must(t, waitFor(10*time.Second, "the gateway serves the orders entry", func() (bool, string) {
		return governs(t, e, g, "shop", "orders", "shop.example.com", "/orders/7", "PUT")
	}))
	for range 10 {
		if c := e.condition(t, "shop", "orders", CondEnforced); c.Status != "False" || c.Reason != ReasonPending {
			t.Fatalf("Enforced before the SecurityPolicy was accepted: %+v", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.setChildAccepted(t, rSecurityPolicy, "shop", spName, true)
	must(t, waitFor(10*time.Second, "orders Enforced", condIs(e, t, "shop", "orders", CondEnforced, "True", ReasonEnforced)))
	must(t, waitFor(10*time.Second, "the route's status says Fenced", routeFenced(t, e, "orders", "True")))

	// A route that gains a path is fenced with no other action.
	changed := time.Now()
	e.apply(t, strings.Replace(ordersRoute, "        - path: {type: PathPrefix, value: /orders}\n", "        - path: {type: PathPrefix, value: /orders}\n        - path: {type: PathPrefix, value: /carts/}\n", 1))
	must(t, waitFor(15*time.Second, "the gained path is served", func() (bool, string) {
		return governs(t, e, g, "shop", "orders", "shop.example.com", "/carts/9", "POST")
	}))
	t.Logf("route change → the gateway serves the new entry: %v", time.Since(changed).Round(time.Millisecond))
	// Its trailing-slash and other spellings take the same entry; the
	// route's other rule (health) is not the policy's.
	for _, path := range []string{"/carts", "/carts/", "/orders", "/orders/", "/ORDERS/1"} {
		ok, why := governs(t, e, g, "shop", "orders", "shop.example.com", path, "DELETE")
		if !ok && path != "/ORDERS/1" {
			t.Errorf("%s is not governed: %s", path, why)
		}
	}
	if ok, why := governs(t, e, g, "shop", "orders", "shop.example.com", "/health", "POST"); ok {
		t.Errorf("the health rule is fenced though the policy names the write rule: %s", why)
	}
	must(t, waitFor(10*time.Second, "Enforced again after the change", condIs(e, t, "shop", "orders", CondEnforced, "True", ReasonEnforced)))

	// Enforced flips back when the implementation stops accepting.
	e.setChildAccepted(t, rSecurityPolicy, "shop", spName, false)
	must(t, waitFor(10*time.Second, "Enforced False after the SecurityPolicy is refused", condIs(e, t, "shop", "orders", CondEnforced, "False", ReasonPending)))
	must(t, waitFor(10*time.Second, "the route's status says not Fenced", routeFenced(t, e, "orders", "False")))
	e.setChildAccepted(t, rSecurityPolicy, "shop", spName, true)
	must(t, waitFor(10*time.Second, "Enforced again", condIs(e, t, "shop", "orders", CondEnforced, "True", "")))

	// A restart converges: the route changes while no controller runs.
	stop()
	e.apply(t, ordersRoute) // /carts/ gone again
	_, stop = e.startController(t, g, nil)
	must(t, waitFor(15*time.Second, "the restarted controller drops the removed path", func() (bool, string) {
		ok, why := governs(t, e, g, "shop", "orders", "shop.example.com", "/carts/9", "POST")
		return !ok, why
	}))
	must(t, waitFor(10*time.Second, "Enforced after the restart", condIs(e, t, "shop", "orders", CondEnforced, "True", "")))

	// Barrier: an EnvoyExtensionPolicy (ext_proc) instead.
	e.apply(t, ordersPolicy+"  barrier: true\n  maxWrite: 10s\n")
	must(t, waitFor(10*time.Second, "the EnvoyExtensionPolicy replaces the SecurityPolicy", func() (bool, string) {
		return e.getQuiet(rExtensionPolicy, "shop", spName+"-extproc") != nil && e.getQuiet(rSecurityPolicy, "shop", spName) == nil, "not yet"
	}))
	strictDryRun(t, e, e.getQuiet(rExtensionPolicy, "shop", spName+"-extproc"))
	must(t, waitFor(10*time.Second, "Enforced False until the new object is accepted", condIs(e, t, "shop", "orders", CondEnforced, "False", ReasonPending)))

	// Delete: the objects, the entries and the route's status go.
	e.del(t, rFencePolicy, "shop", "orders")
	must(t, waitFor(10*time.Second, "everything of the deleted policy gone", func() (bool, string) {
		left := e.getQuiet(rExtensionPolicy, "shop", spName+"-extproc") != nil || len(publishedEntries(t, e)) > 0
		ok, _ := routeFenced(t, e, "orders", "")()
		return !left && !ok, fmt.Sprintf("object or entries left: %v; route status entry left: %v", left, ok)
	}))
	stop()
}

// routeFenced: the route's status.parents has our entry with the Fenced
// condition of status want ("": any entry of ours).
func routeFenced(t *testing.T, e *env, route, want string) func() (bool, string) {
	return func() (bool, string) {
		hr := e.getQuiet(rHTTPRoute, "shop", route)
		st, _ := hr["status"].(map[string]any)
		parents, _ := st["parents"].([]any)
		for _, p := range parents {
			m := p.(map[string]any)
			if m["controllerName"] != StatusControllerName {
				continue
			}
			if want == "" {
				return true, "ours present"
			}
			for _, c := range m["conditions"].([]any) {
				cm := c.(map[string]any)
				if cm["type"] == CondRouteFenced && cm["status"] == want {
					return true, ""
				}
			}
			return false, fmt.Sprint(m["conditions"])
		}
		return false, "no status.parents entry of ours"
	}
}

// strictDryRun re-sends an emitted object (its spec and metadata as
// written) by server-side apply with fieldValidation=Strict, dry run.
func strictDryRun(t *testing.T, e *env, obj map[string]any) {
	t.Helper()
	md := obj["metadata"].(map[string]any)
	clean := map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "spec": obj["spec"],
		"metadata": map[string]any{"name": md["name"], "namespace": md["namespace"], "labels": md["labels"], "ownerReferences": md["ownerReferences"]}}
	b, _ := json.Marshal(clean)
	w, err := e.a.Apply(admin, e.res, b, true)
	if err != nil || len(w) > 0 {
		t.Fatalf("the emitted %s fails strict validation: %v %v", obj["kind"], err, w)
	}
}

func testResolution(t *testing.T, e *env, g *gatewayProc) {
	_, stop := e.startController(t, g, nil)
	defer stop()
	e.apply(t, ordersRoute)
	e.apply(t, strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: first, namespace: shop"))
	must(t, waitFor(10*time.Second, "first Accepted", condIs(e, t, "shop", "first", CondAccepted, "True", "")))
	time.Sleep(1100 * time.Millisecond) // a later creationTimestamp (seconds)
	for _, tc := range []struct{ name, policy, reason string }{
		{"second", strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: second, namespace: shop"), ReasonConflicted},
		{"nosuchroute", strings.ReplaceAll(strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: nosuchroute, namespace: shop"), "name: orders, sectionName", "name: gone, sectionName"), ReasonTargetNotFound},
		{"nosuchrule", strings.ReplaceAll(strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: nosuchrule, namespace: shop"), "sectionName: write", "sectionName: nope"), ReasonTargetNotFound},
		// Admission cannot see that {1}{2} names one key for two paths.
		{"adjacent", strings.ReplaceAll(strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: adjacent, namespace: shop"), "sectionName: write", "sectionName: health"), ""},
		{"cap", strings.ReplaceAll(strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: cap, namespace: shop"), "sectionName: write", "sectionName: health") + "  barrier: true\n  maxWrite: 1h\n", ReasonInvalid},
	} {
		if tc.name == "adjacent" {
			tc.policy = strings.Replace(tc.policy, `key: "orders/{2:int}"`, `key: "{1}{2}"`, 1)
			tc.reason = ReasonInvalid
		}
		e.apply(t, tc.policy)
		must(t, waitFor(10*time.Second, tc.name+" "+tc.reason, condIs(e, t, "shop", tc.name, CondAccepted, "False", tc.reason)))
		must(t, waitFor(5*time.Second, tc.name+" not Enforced", condIs(e, t, "shop", tc.name, CondEnforced, "False", ReasonNotAccepted)))
		if tc.name != "second" {
			e.del(t, rFencePolicy, "shop", tc.name)
		}
	}
	// A regular-expression path cannot be an entry: Invalid, not widened.
	e.apply(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: regex, namespace: shop}
spec:
  parentRefs: [{name: eg}]
  rules:
    - matches: [{path: {type: RegularExpression, value: "/r/[0-9]+"}}]
      backendRefs: [{name: orders, port: 80}]
---
apiVersion: fencegate.io/v1alpha1
kind: FencePolicy
metadata: {name: regex, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: regex}]
`)
	must(t, waitFor(10*time.Second, "regex Invalid", condIs(e, t, "shop", "regex", CondAccepted, "False", ReasonInvalid)))
	// The older policy goes: the newer one takes the rule.
	e.del(t, rFencePolicy, "shop", "first")
	must(t, waitFor(10*time.Second, "second Accepted once first is gone", condIs(e, t, "shop", "second", CondAccepted, "True", "")))
	for _, n := range []string{"second", "regex"} {
		e.del(t, rFencePolicy, "shop", n)
	}
	e.del(t, rHTTPRoute, "shop", "regex")
	must(t, waitFor(10*time.Second, "no entries left", func() (bool, string) {
		return len(publishedEntries(t, e)) == 0, fmt.Sprint(publishedEntries(t, e))
	}))
}

const istioCarts = `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: carts, namespace: shop}
spec:
  parentRefs: [{name: mesh}]
  hostnames: [carts.example.com]
  rules:
    - matches:
        - path: {type: PathPrefix, value: /carts}
          method: POST
        - path: {type: Exact, value: /checkout}
      backendRefs: [{name: carts, port: 80}]
`

func testIstio(t *testing.T, e *env, g *gatewayProc) {
	_, stop := e.startController(t, g, nil)
	defer stop()
	e.apply(t, istioCarts+`---
apiVersion: fencegate.io/v1alpha1
kind: FencePolicy
metadata: {name: carts, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: carts}]
  keyHeader: x-cart
`)
	name := "fencepolicy-carts-mesh-istio"
	must(t, waitFor(10*time.Second, "the AuthorizationPolicy", func() (bool, string) { return e.getQuiet(rAuthorizationPolicy, "shop", name) != nil, "absent" }))
	ap := e.getQuiet(rAuthorizationPolicy, "shop", name)
	strictDryRun(t, e, ap)
	b, _ := json.Marshal(ap["spec"])
	for _, want := range []string{`"action":"CUSTOM"`, `"kind":"Gateway"`, `"name":"mesh"`, `"/carts/*"`, `"/checkout/"`, `"carts.example.com"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the AuthorizationPolicy lacks %s: %s", want, b)
		}
	}
	// The route's POST-only match is not a methods restriction: Istio
	// would miss "post" and a GET with a method-override header.
	if strings.Contains(string(b), `"methods"`) {
		t.Errorf("the AuthorizationPolicy restricts by method: %s", b)
	}
	must(t, waitFor(10*time.Second, "carts pending", condIs(e, t, "shop", "carts", CondEnforced, "False", ReasonPending)))
	e.setChildAccepted(t, rAuthorizationPolicy, "shop", name, true)
	must(t, waitFor(10*time.Second, "carts Enforced", condIs(e, t, "shop", "carts", CondEnforced, "True", "")))
	// The route gains a path: the AuthorizationPolicy's rules follow, and
	// its old acceptance does not count for the new generation.
	e.apply(t, strings.Replace(istioCarts, "        - path: {type: Exact, value: /checkout}\n", "        - path: {type: Exact, value: /checkout}\n        - path: {type: PathPrefix, value: /baskets}\n", 1))
	must(t, waitFor(10*time.Second, "the AuthorizationPolicy covers /baskets", func() (bool, string) {
		ap := e.getQuiet(rAuthorizationPolicy, "shop", name)
		return strings.Contains(toJSON(ap["spec"]), `"/baskets/*"`), toJSON(ap["spec"])
	}))
	must(t, waitFor(10*time.Second, "carts pending again", condIs(e, t, "shop", "carts", CondEnforced, "False", ReasonPending)))
	e.setChildAccepted(t, rAuthorizationPolicy, "shop", name, true)
	must(t, waitFor(10*time.Second, "carts Enforced again", condIs(e, t, "shop", "carts", CondEnforced, "True", "")))
	// An Accepted without observedGeneration says nothing about which
	// spec was accepted: once the route (and so the AuthorizationPolicy's
	// spec, its generation) changes, it must not count.
	e.setChildStatus(t, rAuthorizationPolicy, "shop", name, true, false)
	must(t, waitFor(10*time.Second, "carts not Enforced on an Accepted of no generation", condIs(e, t, "shop", "carts", CondEnforced, "False", ReasonPending)))
	e.apply(t, strings.Replace(istioCarts, "        - path: {type: Exact, value: /checkout}\n", "        - path: {type: Exact, value: /checkout}\n        - path: {type: PathPrefix, value: /baskets}\n        - path: {type: PathPrefix, value: /wishlists}\n", 1))
	must(t, waitFor(10*time.Second, "the AuthorizationPolicy covers /wishlists", func() (bool, string) {
		ap := e.getQuiet(rAuthorizationPolicy, "shop", name)
		return strings.Contains(toJSON(ap["spec"]), `"/wishlists/*"`), toJSON(ap["spec"])
	}))
	for range 15 {
		if c := e.condition(t, "shop", "carts", CondEnforced); c.Status != "False" {
			t.Fatalf("Enforced on a stale Accepted (no observedGeneration) after the spec changed: %+v", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.setChildAccepted(t, rAuthorizationPolicy, "shop", name, true)
	must(t, waitFor(10*time.Second, "carts Enforced at the new generation", condIs(e, t, "shop", "carts", CondEnforced, "True", "")))
	// Istio cannot run the barrier.
	e.apply(t, `
apiVersion: fencegate.io/v1alpha1
kind: FencePolicy
metadata: {name: carts, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: carts}]
  keyHeader: x-cart
  barrier: true
`)
	must(t, waitFor(10*time.Second, "barrier on Istio unsupported", condIs(e, t, "shop", "carts", CondEnforced, "False", ReasonUnsupported)))
	e.del(t, rFencePolicy, "shop", "carts")
	e.del(t, rHTTPRoute, "shop", "carts")
	must(t, waitFor(10*time.Second, "the AuthorizationPolicy deleted", func() (bool, string) { return e.getQuiet(rAuthorizationPolicy, "shop", name) == nil, "present" }))
}

// scenarioEnforcedOnlyWhenObserved: a fresh policy must not be Enforced
// before the test, playing Envoy Gateway, accepts its SecurityPolicy.
func scenarioEnforcedOnlyWhenObserved(t *testing.T, e *env, g *gatewayProc, name string, mutate func(*Options)) error {
	_, stop := e.startController(t, g, mutate)
	defer stop()
	e.apply(t, ordersRoute)
	pol := strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: "+name+", namespace: shop")
	e.apply(t, pol)
	defer e.del(t, rFencePolicy, "shop", name)
	if err := waitFor(10*time.Second, "Accepted", condIs(e, t, "shop", name, CondAccepted, "True", "")); err != nil {
		return err
	}
	for range 15 {
		if c := e.condition(t, "shop", name, CondEnforced); c.Status == "True" {
			return errors.New("Enforced=True before any SecurityPolicy was accepted")
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.setChildAccepted(t, rSecurityPolicy, "shop", "fencepolicy-"+name+"-orders-write", true)
	return waitFor(10*time.Second, "Enforced after acceptance", condIs(e, t, "shop", name, CondEnforced, "True", ""))
}

// scenarioEntriesFromRoute: the entries are the route's hostnames and
// paths: a request to another host or path is not the policy's.
func scenarioEntriesFromRoute(t *testing.T, e *env, g *gatewayProc, name string, mutate func(*Options)) error {
	_, stop := e.startController(t, g, mutate)
	defer stop()
	e.apply(t, ordersRoute)
	e.apply(t, strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: "+name+", namespace: shop"))
	defer e.del(t, rFencePolicy, "shop", name)
	if err := waitFor(10*time.Second, "the route's path governed", func() (bool, string) {
		return governs(t, e, g, "shop", name, "shop.example.com", "/orders/1", "PUT")
	}); err != nil {
		return err
	}
	for _, req := range [][2]string{{"other.example.com", "/orders/1"}, {"shop.example.com", "/health"}, {"shop.example.com", "/elsewhere"}} {
		if ok, why := governs(t, e, g, "shop", name, req[0], req[1], "PUT"); ok {
			return fmt.Errorf("a request the route does not take is governed by the policy's entry: %s", why)
		}
	}
	return nil
}

// scenarioUnacceptedTarget: a route no parent Gateway accepted claims the
// orders route's host with a more specific path, and a policy on it says
// policy: off. The policy must be Accepted=False (TargetNotAccepted) and
// contribute no entry: the orders path stays the orders policy's. Once the
// Gateway accepts the route (its status, at its generation), it counts.
func scenarioUnacceptedTarget(t *testing.T, e *env, g *gatewayProc, name string, mutate func(*Options)) error {
	_, stop := e.startController(t, g, mutate)
	defer stop()
	e.apply(t, ordersRoute)
	e.apply(t, ordersPolicy)
	defer e.del(t, rFencePolicy, "shop", "orders")
	if err := waitFor(10*time.Second, "orders governs /orders/admin", func() (bool, string) {
		return governs(t, e, g, "shop", "orders", "shop.example.com", "/orders/admin", "PUT")
	}); err != nil {
		return err
	}
	e.apply(t, fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %[1]s, namespace: shop, annotations: {%[2]s: "true"}}
spec:
  parentRefs: [{name: eg}]
  hostnames: [shop.example.com]
  rules:
    - matches: [{path: {type: PathPrefix, value: /orders/admin}}]
      backendRefs: [{name: orders, port: 80}]
---
apiVersion: fencegate.io/v1alpha1
kind: FencePolicy
metadata: {name: %[1]s, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: %[1]s}]
  policy: "off"
`, name, NotAcceptedAnnotation))
	defer e.del(t, rHTTPRoute, "shop", name)
	defer e.del(t, rFencePolicy, "shop", name)
	if err := waitFor(10*time.Second, name+" TargetNotAccepted", condIs(e, t, "shop", name, CondAccepted, "False", ReasonTargetNotAccepted)); err != nil {
		return err
	}
	if c := e.condition(t, "shop", name, CondAccepted); !strings.Contains(c.Message, "not accepted by a parent Gateway") || !strings.Contains(c.Message, "shop/eg") {
		return fmt.Errorf("the condition does not say why: %+v", c)
	}
	for range 10 {
		for _, en := range publishedEntries(t, e) {
			if strings.HasPrefix(en.Name, "fencepolicy:shop/"+name+":") {
				return fmt.Errorf("the unaccepted route's policy published %s", en.Name)
			}
		}
		if ok, why := governs(t, e, g, "shop", "orders", "shop.example.com", "/orders/admin", "PUT"); !ok {
			return fmt.Errorf("the orders policy lost /orders/admin: %s", why)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The Gateway accepts it (the annotation goes): now it is a route.
	e.apply(t, fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %[1]s, namespace: shop, annotations: {%[2]s: "false"}}
spec:
  parentRefs: [{name: eg}]
  hostnames: [shop.example.com]
  rules:
    - matches: [{path: {type: PathPrefix, value: /orders/admin}}]
      backendRefs: [{name: orders, port: 80}]
`, name, NotAcceptedAnnotation))
	if err := waitFor(10*time.Second, name+" Accepted once its Gateway accepted the route", condIs(e, t, "shop", name, CondAccepted, "True", "")); err != nil {
		return err
	}
	// An accepted route on a listener for *.tenant.example.com also naming
	// shop.example.com takes only the tenant's hosts: its entries too.
	e.apply(t, fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %[1]s, namespace: shop, annotations: {%[2]s: "false"}}
spec:
  parentRefs: [{name: tenant}]
  hostnames: [a.tenant.example.com, shop.example.com]
  rules:
    - matches: [{path: {type: PathPrefix, value: /orders/admin}}]
      backendRefs: [{name: orders, port: 80}]
`, name, NotAcceptedAnnotation))
	if err := waitFor(10*time.Second, "the tenant's host governed by "+name, func() (bool, string) {
		return governs(t, e, g, "shop", name, "a.tenant.example.com", "/orders/admin", "PUT")
	}); err != nil {
		return err
	}
	if ok, why := governs(t, e, g, "shop", "orders", "shop.example.com", "/orders/admin", "PUT"); !ok {
		return fmt.Errorf("a hostname the route's listener does not admit took the orders entry's place: %s", why)
	}
	return nil
}

// scenarioProofWithoutKey: the test's gateway has no proof key, and the
// controller runs without --proof-signing: a proof: signed policy is
// Invalid, says why, and publishes nothing (published, it would make
// every gateway refuse to start at its next restart).
func scenarioProofWithoutKey(t *testing.T, e *env, g *gatewayProc, name string, mutate func(*Options)) error {
	_, stop := e.startController(t, g, mutate)
	defer stop()
	e.apply(t, ordersRoute)
	e.apply(t, strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: "+name+", namespace: shop")+"  proof: signed\n")
	defer e.del(t, rFencePolicy, "shop", name)
	if err := waitFor(10*time.Second, name+" Invalid", condIs(e, t, "shop", name, CondAccepted, "False", ReasonInvalid)); err != nil {
		return err
	}
	if c := e.condition(t, "shop", name, CondAccepted); !strings.Contains(c.Message, "no proof key") {
		return fmt.Errorf("the condition does not say why: %+v", c)
	}
	for _, en := range publishedEntries(t, e) {
		if strings.HasPrefix(en.Name, "fencepolicy:shop/"+name+":") {
			return fmt.Errorf("published %s", en.Name)
		}
	}
	return nil
}

// testRBAC: the permissions the code declares are exactly what it used in
// this run and exactly what the chart's ClusterRole and Role grant.
func testRBAC(t *testing.T, e *env, g *gatewayProc) {
	// Updates of every emitted kind: the same policies, the Service port
	// changed between two controllers.
	e.apply(t, ordersRoute)
	e.apply(t, ordersPolicy)
	e.apply(t, strings.ReplaceAll(strings.ReplaceAll(ordersPolicy, "name: orders, namespace: shop", "name: rbac-barrier, namespace: shop"), "sectionName: write", "sectionName: health")+"  barrier: true\n")
	spName, eepName := "fencepolicy-orders-orders-write", "fencepolicy-rbac-barrier-orders-health-extproc"
	for _, port := range []int{9191, 9192} {
		_, stop := e.startController(t, g, func(o *Options) { o.ServicePort = port })
		must(t, waitFor(10*time.Second, fmt.Sprintf("both objects with port %d", port), func() (bool, string) {
			sp, eep := e.getQuiet(rSecurityPolicy, "shop", spName), e.getQuiet(rExtensionPolicy, "shop", eepName)
			return sp != nil && eep != nil && strings.Contains(toJSON(sp["spec"]), fmt.Sprintf(`"port":%d`, port)) &&
				strings.Contains(toJSON(eep["spec"]), fmt.Sprintf(`"port":%d`, port)), "not yet"
		}))
		stop()
	}
	_, stop := e.startController(t, g, nil)
	e.del(t, rFencePolicy, "shop", "orders")
	e.del(t, rFencePolicy, "shop", "rbac-barrier")
	must(t, waitFor(10*time.Second, "cleanup", func() (bool, string) { return len(publishedEntries(t, e)) == 0, "entries left" }))
	stop()

	// Exactly: what the run called is what the code declares (the client
	// refuses anything else), and what it declares is what the chart grants.
	used := e.used()
	for _, p := range append(slices.Clone(ClusterPermissions), NamespacePermissions...) {
		if !used[p] {
			t.Errorf("declared (and granted by the chart) but never called in this run: %+v", p)
		}
	}
	for p := range used {
		if !declared(p) {
			t.Errorf("called but not declared: %+v", p)
		}
	}
	chart := chartRules(t)
	var want []string
	for _, p := range ClusterPermissions {
		want = append(want, "ClusterRole "+p.Group+" "+p.Resource+" "+p.Verb)
	}
	for _, p := range NamespacePermissions {
		want = append(want, "Role "+p.Group+" "+p.Resource+" "+p.Verb)
	}
	slices.Sort(want)
	if !slices.Equal(chart, want) {
		t.Errorf("the chart's RBAC differs from the code's calls:\nchart: %q\ncode:  %q", chart, want)
	}
}

// chartRules lists "Kind group resource verb" of the controller's
// ClusterRole and Role in the chart's template.
func chartRules(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "fencegate", "templates", "controller-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The template's RBAC objects are plain YAML between the {{- if }} lines.
	var body []string
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.Contains(l, "{{") {
			body = append(body, l)
		}
	}
	docs, err := kube.YAMLDocs([]byte(strings.Join(body, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range docs {
		kind, _ := d["kind"].(string)
		if kind != "ClusterRole" && kind != "Role" {
			continue
		}
		rules, _ := d["rules"].([]any)
		for _, r := range rules {
			m := r.(map[string]any)
			for _, gr := range m["apiGroups"].([]any) {
				for _, rs := range m["resources"].([]any) {
					for _, v := range m["verbs"].([]any) {
						out = append(out, fmt.Sprintf("%s %s %s %s", kind, gr, rs, v))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
