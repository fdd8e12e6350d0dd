package mesh_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/deploy/mesh"
	"github.com/fencegate/fencegate/e2e/kube"
	"github.com/fencegate/fencegate/internal/testutil"
)

const admin = "admin"

// apply sends manifests as the admin by server-side apply (kube's Apply:
// strict fields, as `kubectl apply --server-side`; with dryRun
// `--dry-run=server`). It returns the API server's warnings.
func apply(a *kube.APIServer, resources kube.Resources, manifests []byte, dryRun bool) (warnings []string, err error) {
	return a.Apply(admin, resources, manifests, dryRun)
}

// shippedObjects are the manifests under deploy/ that are Kubernetes
// objects (istio/meshconfig.yaml is a meshConfig snippet, not an object:
// TestMeshConfigFields checks it against Istio's API instead).
var shippedObjects = []string{
	"istio/authorizationpolicy.yaml",
	"gateway-api/httproutes.yaml",
	"envoy-gateway/securitypolicy.yaml",
	"contour/httpproxy.yaml",
}

// TestShippedManifestsServerSideDryRun installs the projects' real CRDs
// (Istio's, Gateway API's, Envoy Gateway's and Contour's, from their Go
// modules) into a real kube-apiserver and has it validate every shipped
// mesh manifest by a server-side dry run: schema, enums, CEL rules, strict
// fields. The same run must refuse each deliberately broken variant, or
// passing it would prove nothing. It fails, never skips, when the API
// server's binaries (make kube-bins) or the modules cannot be had.
func TestShippedManifestsServerSideDryRun(t *testing.T) {
	testutil.NeedService(t, "kube-apiserver and etcd (make kube-bins)")
	start := time.Now()
	crds := realCRDs(t)
	fetched := time.Since(start)
	a := kube.Start(t, []kube.User{{Name: admin, Groups: "system:masters"}})
	started := time.Since(start)

	resources, err := crdResources(crds)
	if err != nil {
		t.Fatal(err)
	}
	crdRes := kube.Resources{"apiextensions.k8s.io/v1 CustomResourceDefinition": {Plural: "customresourcedefinitions"}}
	// The CRDs are installed at once: the API server compiles each one's
	// schema and CEL rules on its own, so in parallel they are established
	// in about the time of the largest.
	var names []string
	errs := make(chan error, len(crds))
	for _, crd := range crds {
		names = append(names, kube.MetaString(crd, "name"))
		b, err := json.Marshal(crd)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := apply(a, crdRes, b, false)
			if err != nil {
				err = fmt.Errorf("install CRD %s: %w", kube.MetaString(crd, "name"), err)
			}
			errs <- err
		}()
	}
	for range crds {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	a.WaitEstablished(t, admin, names...)
	// A dry run does not create namespaces, and objects in one that does
	// not exist are refused: create them for real.
	for _, ns := range []string{"shop", "fencegate"} {
		if _, err := apply(a, resources, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n"), false); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	installed := time.Since(start)

	shipped := map[string][]byte{}
	for _, f := range shippedObjects {
		b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		shipped[f] = b
	}
	for _, f := range shippedObjects {
		t.Run("deploy/"+f, func(t *testing.T) {
			warnings, err := apply(a, resources, shipped[f], true)
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) > 0 {
				t.Errorf("the API server warned:\n%s", strings.Join(warnings, "\n"))
			}
		})
	}

	// A table whose entry writes with every method: the policy's one rule
	// is empty (it matches every request).
	t.Run("istio: an entry writing with GET, HEAD and OPTIONS", func(t *testing.T) {
		table := loadTable(t, "routes:\n  - {name: rpc, match: {path: {value: /rpc}}, methods: \"*\", key: rpc}\n")
		out, err := mesh.Istio(table, mesh.ShippedOptions)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(out, []byte("  rules:\n    - {}\n")) {
			t.Fatalf("want one empty rule:\n%s", out)
		}
		if warnings, err := apply(a, resources, out, true); err != nil || len(warnings) > 0 {
			t.Fatalf("%v %q", err, warnings)
		}
	})

	// Each broken variant changes one thing in a shipped file; the dry run
	// must refuse it, naming what is wrong.
	for _, tc := range []struct{ name, file, from, to, want string }{
		{"istio: unknown action", "istio/authorizationpolicy.yaml", "action: CUSTOM", "action: CUSTM", "action"},
		{"istio: misspelt provider field", "istio/authorizationpolicy.yaml", "  provider:\n", "  providr:\n", "providr"},
		{"istio: wildcard in the workload selector", "istio/authorizationpolicy.yaml", "app: orders", "app: ord*", "wildcard"},
		{"istio: notMethods not a list", "istio/authorizationpolicy.yaml", "notMethods:\n              - GET", "notMethods: GET", "notMethods"},
		{"istio: unknown TLS mode", "istio/authorizationpolicy.yaml", "mode: MUTUAL", "mode: MTLS", "mode"},
		{"gateway-api: unknown path type", "gateway-api/httproutes.yaml", "type: RegularExpression", "type: Regex", "type"},
		{"gateway-api: lower-case method", "gateway-api/httproutes.yaml", "method: POST", "method: post", "method"},
		{"gateway-api: relative prefix", "gateway-api/httproutes.yaml", "value: /inventory", "value: inventory", "path"},
		{"envoy-gateway: extension without value", "envoy-gateway/securitypolicy.yaml", "        type: Value\n        value: orders\n", "        type: Value\n", "value"},
		{"envoy-gateway: success as statusOnError", "envoy-gateway/securitypolicy.yaml", "statusOnError: 503", "statusOnError: 200", "statusOnError"},
		{"envoy-gateway: misspelt extAuth", "envoy-gateway/securitypolicy.yaml", "  extAuth:\n", "  extAuthz:\n", "extAuthz"},
		{"envoy-gateway: backend TLS without hostname", "envoy-gateway/securitypolicy.yaml", "    hostname: fencegate.fencegate.svc\n", "", "hostname"},
		{"envoy-gateway: misspelt backendTLS", "envoy-gateway/securitypolicy.yaml", "  backendTLS:\n", "  backendTls:\n", "backendTls"},
		{"contour: unknown protocol", "contour/httpproxy.yaml", "protocol: h2", "protocol: h3", "protocol"},
		{"contour: context value not a string", "contour/httpproxy.yaml", "fence_route: checkout", "fence_route: 7", "fence_route"},
		{"contour: misspelt authPolicy", "contour/httpproxy.yaml", "authPolicy:", "authPolicies:", "authPolicies"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			good := shipped[tc.file]
			broken := bytes.Replace(good, []byte(tc.from), []byte(tc.to), 1)
			if bytes.Equal(broken, good) {
				t.Fatalf("%q is not in deploy/%s", tc.from, tc.file)
			}
			warnings, err := apply(a, resources, broken, true)
			complaint := strings.Join(warnings, "\n")
			if err != nil {
				complaint += "\n" + err.Error()
			}
			if err == nil || !strings.Contains(complaint, tc.want) {
				t.Fatalf("the broken manifest passed the dry run (%q); want it refused, naming %s", complaint, tc.want)
			}
			t.Logf("refused: %.300s", err)
		})
	}
	t.Logf("CRDs from the module cache in %v; API server ready at %v; %d CRDs established and namespaces made at %v; all dry runs done at %v",
		fetched.Round(time.Millisecond), started.Round(time.Millisecond), len(names), installed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
