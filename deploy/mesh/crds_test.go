package mesh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/e2e/kube"
)

// crdSource is where a project ships the CRDs of the kinds the manifests
// use: a file in its Go module, fetched through the module proxy into the
// module cache (not a dependency of fencegate: go.mod does not change).
type crdSource struct {
	module, version string
	file            string   // path inside the module
	names           []string // the CRDs taken from it (metadata.name)
}

// crdSources are the real CRDs, from the projects' own modules. Versions
// `go list -m -versions` offers; gateway-api v1.6.3 is the newest that
// builds with this Go (v1.7.0 wants go 1.27), Envoy Gateway v1.9.1 itself
// requires gateway-api v1.6.1.
var crdSources = []crdSource{
	{"istio.io/api", "v1.32.0", "kubernetes/customresourcedefinitions.gen.yaml",
		[]string{"authorizationpolicies.security.istio.io", "destinationrules.networking.istio.io"}},
	{"sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard/gateway.networking.k8s.io_gateways.yaml",
		[]string{"gateways.gateway.networking.k8s.io"}},
	{"sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",
		[]string{"httproutes.gateway.networking.k8s.io"}},
	{"sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml",
		[]string{"referencegrants.gateway.networking.k8s.io"}},
	{"sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard/gateway.networking.k8s.io_backendtlspolicies.yaml",
		[]string{"backendtlspolicies.gateway.networking.k8s.io"}},
	{"github.com/envoyproxy/gateway", "v1.9.1", "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_securitypolicies.yaml",
		[]string{"securitypolicies.gateway.envoyproxy.io"}},
	{"github.com/envoyproxy/gateway", "v1.9.1", "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyproxies.yaml",
		[]string{"envoyproxies.gateway.envoyproxy.io"}},
	{"github.com/projectcontour/contour", "v1.33.8", "examples/contour/01-crds.yaml",
		[]string{"httpproxies.projectcontour.io", "extensionservices.projectcontour.io"}},
}

// moduleDir downloads module@version into the module cache (a no-op when it
// is there) and returns its directory. It runs outside this module, so
// fencegate's go.mod and go.sum are never touched.
func moduleDir(t *testing.T, module, version string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Error != "" || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s %s (the CRDs come from the module proxy: check GOPROXY and the network)", module, version, err, info.Error, stderr.String())
	}
	return info.Dir
}

// realCRDs returns the CRDs of crdSources, each exactly once, read from the
// projects' modules. A missing file or CRD fails the test.
func realCRDs(t *testing.T) []map[string]any {
	t.Helper()
	var crds []map[string]any
	dirs := map[string]string{} // module@version → directory: one `go mod download` each
	for _, src := range crdSources {
		mv := src.module + "@" + src.version
		if dirs[mv] == "" {
			dirs[mv] = moduleDir(t, src.module, src.version)
		}
		dir := dirs[mv]
		raw, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(src.file)))
		if err != nil {
			t.Fatalf("%s@%s: %v", src.module, src.version, err)
		}
		docs, err := kube.YAMLDocs(raw)
		if err != nil {
			t.Fatalf("%s@%s %s: %v", src.module, src.version, src.file, err)
		}
		found := map[string]bool{}
		for _, d := range docs {
			if d["kind"] != "CustomResourceDefinition" {
				continue
			}
			name := kube.MetaString(d, "name")
			if slices.Contains(src.names, name) {
				found[name] = true
				crds = append(crds, d)
			}
		}
		for _, n := range src.names {
			if !found[n] {
				t.Fatalf("%s@%s %s has no CRD %s", src.module, src.version, src.file, n)
			}
		}
	}
	return crds
}

// crdResources maps "group/version Kind" to its resource for every served
// version of the CRDs.
func crdResources(crds []map[string]any) (kube.Resources, error) {
	out := kube.Resources{
		"v1 Namespace": {Plural: "namespaces"},
	}
	for _, d := range crds {
		b, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Scope string `json:"scope"`
				Names struct {
					Plural, Kind string
				} `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Served bool   `json:"served"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(b, &crd); err != nil {
			return nil, err
		}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				out[fmt.Sprintf("%s/%s %s", crd.Spec.Group, v.Name, crd.Spec.Names.Kind)] = kube.Resource{Plural: crd.Spec.Names.Plural, Namespaced: crd.Spec.Scope == "Namespaced"}
			}
		}
	}
	return out, nil
}
