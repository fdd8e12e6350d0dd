package fencepolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/cmd/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/e2e/kube"
	"github.com/fencegate/fencegate/internal/testutil"
)

const admin = "admin"

// crdSources: the real CRDs of the kinds the controller reads and emits,
// from the projects' Go modules (module cache, not go.mod), the versions
// deploy/mesh's dry runs use.
var crdSources = []struct {
	module, version, file string
	names                 []string
}{
	{"istio.io/api", "v1.32.0", "kubernetes/customresourcedefinitions.gen.yaml", []string{"authorizationpolicies.security.istio.io"}},
	{"sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard/gateway.networking.k8s.io_gateways.yaml", []string{"gateways.gateway.networking.k8s.io"}},
	{"sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml", []string{"gatewayclasses.gateway.networking.k8s.io"}},
	{"sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml", []string{"httproutes.gateway.networking.k8s.io"}},
	{"github.com/envoyproxy/gateway", "v1.9.1", "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_securitypolicies.yaml", []string{"securitypolicies.gateway.envoyproxy.io"}},
	{"github.com/envoyproxy/gateway", "v1.9.1", "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml", []string{"envoyextensionpolicies.gateway.envoyproxy.io"}},
}

// ourCRD is the shipped FencePolicy CRD.
var ourCRD = filepath.Join("..", "..", "deploy", "helm", "fencegate", "crds", "fencepolicies.fencegate.io.yaml")

func moduleDir(t *testing.T, module, version string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Error != "" || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s (the CRDs come from the module proxy)", module, version, err, info.Error)
	}
	return info.Dir
}

// env is one API server with every CRD installed, shared by the package's
// tests (started once: it is most of the run's time).
type env struct {
	a         *kube.APIServer
	res       kube.Resources
	tokenFile string

	mu    sync.Mutex
	kubes []*Kube // every controller's connection, for the RBAC comparison
}

var (
	envOnce sync.Once
	shared  *env
)

func getEnv(t *testing.T) *env {
	t.Helper()
	envOnce.Do(func() {
		// The API server belongs to the first test that asks: started
		// under a test that outlives the others (TestMain-less): the
		// top-level TestFencePolicy runs all of them as subtests.
		shared = startEnv(t)
	})
	if shared == nil {
		t.Fatal("the shared API server did not start")
	}
	return shared
}

func startEnv(t *testing.T) *env {
	t.Helper()
	var crds []map[string]any
	dirs := map[string]string{}
	for _, src := range crdSources {
		mv := src.module + "@" + src.version
		if dirs[mv] == "" {
			dirs[mv] = moduleDir(t, src.module, src.version)
		}
		raw, err := os.ReadFile(filepath.Join(dirs[mv], filepath.FromSlash(src.file)))
		if err != nil {
			t.Fatal(err)
		}
		docs, err := kube.YAMLDocs(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if d["kind"] == "CustomResourceDefinition" && slices.Contains(src.names, kube.MetaString(d, "name")) {
				crds = append(crds, d)
			}
		}
	}
	raw, err := os.ReadFile(ourCRD)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := kube.YAMLDocs(raw)
	if err != nil || len(docs) != 1 {
		t.Fatalf("%s: %v (%d documents)", ourCRD, err, len(docs))
	}
	crds = append(crds, docs[0])

	a := kube.Start(t, []kube.User{{Name: admin, Groups: "system:masters"}})
	crdRes := kube.Resources{"apiextensions.k8s.io/v1 CustomResourceDefinition": {Plural: "customresourcedefinitions"}}
	var names []string
	errs := make(chan error, len(crds))
	for _, crd := range crds {
		names = append(names, kube.MetaString(crd, "name"))
		b, _ := json.Marshal(crd)
		go func() { _, err := a.Apply(admin, crdRes, b, false); errs <- err }()
	}
	for range crds {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	a.WaitEstablished(t, admin, names...)
	res := kube.Resources{
		"v1 Namespace": {Plural: "namespaces"},
		"v1 ConfigMap": {Plural: "configmaps", Namespaced: true},
	}
	for _, r := range []resource{rFencePolicy, rHTTPRoute, rGateway, rGatewayClass, rSecurityPolicy, rExtensionPolicy, rAuthorizationPolicy} {
		kind := map[string]string{"fencepolicies": "FencePolicy", "httproutes": "HTTPRoute", "gateways": "Gateway", "gatewayclasses": "GatewayClass",
			"securitypolicies": "SecurityPolicy", "envoyextensionpolicies": "EnvoyExtensionPolicy", "authorizationpolicies": "AuthorizationPolicy"}[r.plural]
		res[r.group+"/"+r.version+" "+kind] = kube.Resource{Plural: r.plural, Namespaced: r.namespaced}
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(a.Tokens[admin]), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{a: a, res: res, tokenFile: tokenFile}
	e.apply(t, `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Namespace
metadata: {name: fencegate}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: eg}
spec: {controllerName: gateway.envoyproxy.io/gatewayclass-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: eg, namespace: shop}
spec:
  gatewayClassName: eg
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: mesh, namespace: shop}
spec:
  gatewayClassName: istio
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tenant, namespace: shop}
spec:
  gatewayClassName: eg
  listeners: [{name: http, protocol: HTTP, port: 80, hostname: "*.tenant.example.com"}]
`)
	return e
}

// apply applies manifests (server-side, strict fields) or fails the test.
func (e *env) apply(t *testing.T, manifests string) {
	t.Helper()
	if _, err := e.a.Apply(admin, e.res, []byte(manifests), false); err != nil {
		t.Fatal(err)
	}
}

// kube is a controller's connection (as the admin: RBAC is checked by
// comparing the declared permissions with the chart, not by the server).
func (e *env) kube() *Kube {
	k := &Kube{URL: e.a.URL, TokenFile: e.tokenFile, HTTP: e.a.Client, Namespace: "fencegate"}
	e.mu.Lock()
	e.kubes = append(e.kubes, k)
	e.mu.Unlock()
	return k
}

// used is every permission any controller of the run exercised.
func (e *env) used() map[Permission]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[Permission]bool{}
	for _, k := range e.kubes {
		for _, p := range k.Used() {
			out[p] = true
		}
	}
	return out
}

// get reads one object as a map (nil when it does not exist).
func (e *env) get(t *testing.T, r resource, ns, name string) map[string]any {
	t.Helper()
	code, body, _, err := e.a.Do(context.Background(), admin, http.MethodGet, r.path(ns, name, ""), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if code == http.StatusNotFound {
		return nil
	}
	if code != http.StatusOK {
		t.Fatalf("get %s: %d %s", r.path(ns, name, ""), code, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *env) del(t *testing.T, r resource, ns, name string) {
	t.Helper()
	code, body, _, err := e.a.Do(context.Background(), admin, http.MethodDelete, r.path(ns, name, ""), nil, "")
	if err != nil || (code != http.StatusOK && code != http.StatusNotFound) {
		t.Fatalf("delete %s: %d %s %v", r.path(ns, name, ""), code, body, err)
	}
}

// condition returns a FencePolicy's condition of type typ.
func (e *env) condition(t *testing.T, ns, name, typ string) Condition {
	t.Helper()
	obj := e.get(t, rFencePolicy, ns, name)
	var p FencePolicy
	b, _ := json.Marshal(obj)
	_ = json.Unmarshal(b, &p)
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return Condition{}
}

// setChildAccepted plays the implementation's controller: it writes the
// child's status, Accepted True or False at the child's generation.
func (e *env) setChildAccepted(t *testing.T, r resource, ns, name string, ok bool) {
	t.Helper()
	e.setChildStatus(t, r, ns, name, ok, true)
}

// setChildStatus is setChildAccepted, with observedGeneration left out
// when withGen is false (a controller, or a stale status, that does not
// say which spec it observed).
func (e *env) setChildStatus(t *testing.T, r resource, ns, name string, ok, withGen bool) {
	t.Helper()
	for range 20 {
		obj := e.get(t, r, ns, name)
		if obj == nil {
			t.Fatalf("%s %s/%s does not exist", r.plural, ns, name)
		}
		gen := obj["metadata"].(map[string]any)["generation"]
		st := "True"
		reason := "Accepted"
		if !ok {
			st, reason = "False", "Invalid"
		}
		cond := map[string]any{"type": "Accepted", "status": st, "reason": reason, "message": "test plays the controller",
			"observedGeneration": gen, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
		if !withGen {
			delete(cond, "observedGeneration")
		}
		switch r {
		case rAuthorizationPolicy:
			obj["status"] = map[string]any{"conditions": []any{cond}}
		default:
			obj["status"] = map[string]any{"ancestors": []any{map[string]any{
				"ancestorRef":    map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "eg", "namespace": ns},
				"controllerName": ControllerEnvoyGateway,
				"conditions":     []any{cond},
			}}}
		}
		b, _ := json.Marshal(obj)
		code, body, _, err := e.a.Do(context.Background(), admin, http.MethodPut, r.path(ns, name, "status"), b, "")
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusConflict {
			continue
		}
		if code != http.StatusOK {
			t.Fatalf("status of %s/%s: %d %s", ns, name, code, body)
		}
		return
	}
	t.Fatal("status update kept conflicting")
}

// gatewayProc is a real `fencegate serve` whose config includes the
// routes file a goroutine copies from the published ConfigMap (playing
// the kubelet's ConfigMap volume).
type gatewayProc struct {
	metrics string
	file    string
	out     *testutil.LogBuffer
}

func (e *env) startGateway(t *testing.T, ctx context.Context) *gatewayProc {
	t.Helper()
	bin, err := fencegatetest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	httpPort, authzPort := kube.FreePort(t), kube.FreePort(t)
	g := &gatewayProc{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort), file: filepath.Join(dir, "policy", RoutesFileKey), out: &testutil.LogBuffer{}}
	if err := os.MkdirAll(filepath.Dir(g.file), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("store: bolt://%s\nhttp: {addr: 127.0.0.1:%d}\ngrpc: {addr: \"off\"}\nauthz: {addr: 127.0.0.1:%d}\nroutesFile: %s\n",
		filepath.Join(dir, "g.db"), httpPort, authzPort, g.file)
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfgFile)
	cmd.Stdout, cmd.Stderr = g.out, g.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gateway output:\n%s", strings.Join(g.out.Lines(), "\n"))
		}
	})
	// The kubelet's part: the ConfigMap's key, projected as a file.
	go func() {
		var last []byte
		for ctx.Err() == nil {
			obj := e.getQuiet(rConfigMap, "fencegate", "fencegate-policy-routes")
			data, _ := obj["data"].(map[string]any)
			if s, ok := data[RoutesFileKey].(string); ok {
				b := []byte(s)
				if !bytes.Equal(b, last) {
					tmp := g.file + ".tmp"
					if os.WriteFile(tmp, b, 0o644) == nil && os.Rename(tmp, g.file) == nil {
						last = b
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return g
}

func (e *env) getQuiet(r resource, ns, name string) map[string]any {
	code, body, _, err := e.a.Do(context.Background(), admin, http.MethodGet, r.path(ns, name, ""), nil, "")
	if err != nil || code != http.StatusOK {
		return nil
	}
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	return m
}

// served is the routes-file hash the gateway reports ("" when none).
func (g *gatewayProc) served() string {
	c := &Controller{hc: &http.Client{Timeout: time.Second}}
	h, _ := c.gatewayHash(context.Background(), g.metrics)
	return h
}

// startController runs a controller until the returned stop is called.
func (e *env) startController(t *testing.T, g *gatewayProc, mutate func(*Options)) (*Controller, func()) {
	t.Helper()
	o := Options{Kube: e.kube(), Service: "fencegate", ServicePort: 9191, Gateways: []string{g.metrics}, Resync: 300 * time.Millisecond,
		Logger: testutil.Logger(&testutil.LogBuffer{}, slog.LevelWarn)}
	if mutate != nil {
		mutate(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return c, stop
}

// NotAcceptedAnnotation on a route in a test: the Gateway implementations
// the test plays never accept it (a route claiming a host its Gateway's
// listeners do not allow, or one from a namespace they do not admit).
const NotAcceptedAnnotation = "test.fencegate.io/not-accepted"

// playGatewayControllers plays Envoy Gateway's and Istio's Gateway
// controllers for routes: every 100 ms, each route's parentRef to an
// existing Gateway gets a status.parents entry of the GatewayClass's
// controllerName with Accepted=True at the route's generation, unless the
// route carries NotAcceptedAnnotation (then their entries are removed).
// Other controllers' entries (the FencePolicy controller's) are kept; an
// update with a stale resourceVersion conflicts and is redone.
func (e *env) playGatewayControllers(ctx context.Context) {
	go func() {
		for ctx.Err() == nil {
			e.acceptRoutes()
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

func (e *env) acceptRoutes() {
	list := e.getQuiet(rHTTPRoute, "", "")
	items, _ := list["items"].([]any)
	for _, it := range items {
		route, _ := it.(map[string]any)
		md, _ := route["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		name, _ := md["name"].(string)
		gen := md["generation"]
		ann, _ := md["annotations"].(map[string]any)
		refuse := ann[NotAcceptedAnnotation] == "true"
		spec, _ := route["spec"].(map[string]any)
		refs, _ := spec["parentRefs"].([]any)
		status, _ := route["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
		}
		old, _ := status["parents"].([]any)
		impls := map[string]bool{}
		var next []any
		for _, r := range refs {
			ref, _ := r.(map[string]any)
			gns := ns
			if s, _ := ref["namespace"].(string); s != "" {
				gns = s
			}
			gw := e.getQuiet(rGateway, gns, fmt.Sprint(ref["name"]))
			if gw == nil {
				continue
			}
			cls := e.getQuiet(rGatewayClass, "", fmt.Sprint(gw["spec"].(map[string]any)["gatewayClassName"]))
			if cls == nil {
				continue
			}
			impl := fmt.Sprint(cls["spec"].(map[string]any)["controllerName"])
			impls[impl] = true
			if refuse {
				continue
			}
			next = append(next, map[string]any{"parentRef": ref, "controllerName": impl, "conditions": []any{map[string]any{
				"type": "Accepted", "status": "True", "reason": "Accepted", "message": "test plays the Gateway controller",
				"observedGeneration": gen, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}})
		}
		var kept, mine []any
		for _, p := range old {
			m, _ := p.(map[string]any)
			if impls[fmt.Sprint(m["controllerName"])] {
				mine = append(mine, p)
			} else {
				kept = append(kept, p)
			}
		}
		same := len(mine) == len(next)
		for i := 0; same && i < len(mine); i++ {
			a, b := mine[i].(map[string]any), next[i].(map[string]any)
			ac, _ := a["conditions"].([]any)
			same = toJSON(a["parentRef"]) == toJSON(b["parentRef"]) && a["controllerName"] == b["controllerName"] &&
				len(ac) == 1 && toJSON(ac[0].(map[string]any)["observedGeneration"]) == toJSON(gen)
		}
		if same {
			continue
		}
		status["parents"] = append(kept, next...)
		if status["parents"] == nil {
			status["parents"] = []any{}
		}
		route["status"] = status
		route["apiVersion"], route["kind"] = "gateway.networking.k8s.io/v1", "HTTPRoute"
		b, _ := json.Marshal(route)
		_, _, _, _ = e.a.Do(context.Background(), admin, http.MethodPut, rHTTPRoute.path(ns, name, "status"), b, "")
	}
}
