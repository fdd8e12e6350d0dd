package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/deploy/helm"
	"github.com/fencegate/fencegate/deploy/k8s"
)

// resources maps the kinds fencegate's manifests use to their REST
// resource: the path segment and whether they live in a namespace. A kind
// missing here fails the test, so a new template cannot go unvalidated.
var resources = map[string]struct {
	plural     string
	namespaced bool
}{
	"v1 Namespace":                            {"namespaces", false},
	"v1 ServiceAccount":                       {"serviceaccounts", true},
	"v1 ConfigMap":                            {"configmaps", true},
	"v1 Secret":                               {"secrets", true},
	"v1 Service":                              {"services", true},
	"apps/v1 Deployment":                      {"deployments", true},
	"policy/v1 PodDisruptionBudget":           {"poddisruptionbudgets", true},
	"networking.k8s.io/v1 NetworkPolicy":      {"networkpolicies", true},
	"cert-manager.io/v1 Certificate":          {"certificates", true},
	"cert-manager.io/v1 Issuer":               {"issuers", true},
	"monitoring.coreos.com/v1 ServiceMonitor": {"servicemonitors", true},
	"admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration": {"validatingwebhookconfigurations", false},
	"apiextensions.k8s.io/v1 CustomResourceDefinition":               {"customresourcedefinitions", false},
}

// docs splits YAML into documents (as JSON objects), skipping empty ones.
func docs(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode YAML: %v", err)
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// objectPath is the REST path of doc.
func objectPath(doc map[string]any) (string, error) {
	apiVersion, _ := doc["apiVersion"].(string)
	kind, _ := doc["kind"].(string)
	md, _ := doc["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	r, ok := resources[apiVersion+" "+kind]
	if !ok || name == "" {
		return "", fmt.Errorf("no REST resource known for %s %s %q: add it to resources", apiVersion, kind, name)
	}
	base := "/apis/" + apiVersion
	if !strings.Contains(apiVersion, "/") {
		base = "/api/" + apiVersion
	}
	if r.namespaced {
		if ns == "" {
			return "", fmt.Errorf("%s %s has no namespace", kind, name)
		}
		base += "/namespaces/" + ns
	}
	return base + "/" + r.plural + "/" + name, nil
}

// apply sends every document with server-side apply: created or updated,
// with strict field validation (an unknown or duplicate field is an error,
// not a warning), through every admission plugin (PodSecurity included).
// With dryRun nothing is stored. It returns the API server's warnings.
func (c *cluster) apply(t *testing.T, manifests []byte, dryRun bool) (warnings []string, err error) {
	t.Helper()
	q := url.Values{"fieldManager": {"fencegate-e2e"}, "fieldValidation": {"Strict"}, "force": {"true"}}
	if dryRun {
		q.Set("dryRun", "All")
	}
	for _, doc := range docs(t, manifests) {
		path, err := objectPath(doc)
		if err != nil {
			return warnings, err
		}
		body, err := json.Marshal(doc)
		if err != nil {
			return warnings, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, raw, hdr, err := c.doHeader(ctx, adminUser, http.MethodPatch, path+"?"+q.Encode(), body, "application/apply-patch+yaml")
		cancel()
		if err != nil {
			return warnings, fmt.Errorf("%s: %w", path, err)
		}
		for _, w := range hdr.Values("Warning") {
			warnings = append(warnings, path+": "+w)
		}
		if code != http.StatusOK && code != http.StatusCreated {
			return warnings, fmt.Errorf("%s: %d %s", path, code, raw)
		}
	}
	return warnings, nil
}

// TestChartServerSideDryRun renders the Helm chart with every variant of its
// values (helm.Variants, plus another release name and namespace) and has a
// real kube-apiserver validate the result with a server-side dry run; the
// same for deploy/k8s, file by file as its kustomization lists them.
// cert-manager and Prometheus Operator are not installed on the bare API
// server: testdata/crds.yaml gives it minimal CRDs of our own for
// Certificate, Issuer and ServiceMonitor, so those objects are validated
// too (against a schema of the fields the chart uses).
func TestChartServerSideDryRun(t *testing.T) {
	c := startCluster(t)
	crds, err := os.ReadFile("testdata/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.apply(t, crds, false); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
	for _, crd := range docs(t, crds) {
		c.waitEstablished(t, crd["metadata"].(map[string]any)["name"].(string))
	}
	// A dry run does not create the namespace, and objects in a namespace
	// that does not exist are refused: create them for real. They enforce
	// the restricted Pod Security level (as deploy/k8s's namespace does)
	// and warn about it, so a pod template that breaks it is reported.
	for _, ns := range []string{"fencegate", "ops"} {
		doc := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n"+
			"    pod-security.kubernetes.io/enforce: restricted\n    pod-security.kubernetes.io/warn: restricted\n", ns)
		if _, err := c.apply(t, []byte(doc), false); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}

	renderings := map[string][]byte{}
	for name, args := range helm.Variants() {
		out, err := helm.Template(context.Background(), "fencegate", "fencegate", args...)
		if err != nil {
			t.Fatal(err)
		}
		renderings["chart "+name] = out
	}
	out, err := helm.Template(context.Background(), "gate", "ops", helm.Required...)
	if err != nil {
		t.Fatal(err)
	}
	renderings["chart as release gate in ops"] = out
	renderings["deploy/k8s"] = kustomized(t)

	names := make([]string, 0, len(renderings))
	for n := range renderings {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			warnings, err := c.apply(t, renderings[name], true)
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) > 0 {
				t.Errorf("the API server warned:\n%s", strings.Join(warnings, "\n"))
			}
		})
	}

	// The dry run must refuse what is wrong, or passing it proves nothing.
	good := renderings["chart monitored, narrowed"]
	for _, tc := range []struct{ name, from, to, want string }{
		{"misspelt field", "\n    failurePolicy: Fail", "\n    failurPolicy: Fail", "failurPolicy"},
		{"root pod", "runAsNonRoot: true", "runAsNonRoot: false", "PodSecurity"},
		{"privilege escalation", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "PodSecurity"},
		{"certificate without issuer", "  issuerRef:\n    name: fencegate-ca\n    kind: Issuer\n", "", "issuerRef"},
		{"service monitor without selector", "spec:\n  selector:\n    matchLabels:", "spec:\n  selectr:\n    matchLabels:", "selector"},
		{"service monitor interval not a string", "interval: 30s", "interval: 30", "interval"},
		{"network policy port name too long", "        - port: authz", "        - port: authz-port-name-too-long", "port"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			broken := bytes.Replace(good, []byte(tc.from), []byte(tc.to), 1)
			if bytes.Equal(broken, good) {
				t.Fatalf("%q not in the rendering", tc.from)
			}
			warnings, err := c.apply(t, broken, true)
			complaint := strings.Join(warnings, "\n")
			if err != nil {
				complaint += "\n" + err.Error()
			}
			if !strings.Contains(complaint, tc.want) {
				t.Fatalf("the broken rendering passed the dry run (%q); want a complaint about %s", complaint, tc.want)
			}
			t.Logf("refused: %s", complaint)
		})
	}
}

// kustomized is deploy/k8s as its kustomization lists it (resources only,
// which is all it uses: TestKustomizationListsEveryFile keeps it so).
func kustomized(t *testing.T) []byte {
	t.Helper()
	raw, err := k8s.Files.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kz struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(raw, &kz); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for _, r := range kz.Resources {
		b, err := k8s.Files.ReadFile(filepath.ToSlash(r))
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString("---\n")
		all.Write(b)
	}
	return all.Bytes()
}

// waitEstablished waits until the API server serves the CRD's resource.
func (c *cluster) waitEstablished(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, raw, err := c.do(context.Background(), adminUser, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, nil, "")
		if err == nil && code == http.StatusOK {
			var crd struct {
				Status struct {
					Conditions []struct{ Type, Status string } `json:"conditions"`
				} `json:"status"`
			}
			if json.Unmarshal(raw, &crd) == nil && slices.ContainsFunc(crd.Status.Conditions, func(c struct{ Type, Status string }) bool {
				return c.Type == "Established" && c.Status == "True"
			}) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not established within a minute (last: %d %s %v)", name, code, raw, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
