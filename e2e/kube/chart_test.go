package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/deploy/helm"
	"github.com/fencegate/fencegate/deploy/k8s"
	"github.com/fencegate/fencegate/e2e/kube"
	"github.com/fencegate/fencegate/internal/testutil"
)

// resources maps the kinds fencegate's manifests use to their REST
// resource: the path segment and whether they live in a namespace. A kind
// missing here fails the test, so a new template cannot go unvalidated.
var resources = kube.Resources{
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
	"rbac.authorization.k8s.io/v1 ClusterRole":                       {"clusterroles", false},
	"rbac.authorization.k8s.io/v1 ClusterRoleBinding":                {"clusterrolebindings", false},
	"rbac.authorization.k8s.io/v1 Role":                              {"roles", true},
	"rbac.authorization.k8s.io/v1 RoleBinding":                       {"rolebindings", true},
}

// docs splits YAML into documents, skipping empty ones.
func docs(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	out, err := kube.YAMLDocs(data)
	if err != nil {
		t.Fatalf("decode YAML: %v", err)
	}
	return out
}

// apply sends manifests as the admin by server-side apply (kube's Apply:
// strict field validation, every admission plugin, PodSecurity included).
func (c *cluster) apply(manifests []byte, dryRun bool) (warnings []string, err error) {
	return c.Apply(adminUser, resources, manifests, dryRun)
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
	testutil.NeedService(t, "kube-apiserver and etcd (make kube-bins)")
	c := startCluster(t)
	crds, err := os.ReadFile("testdata/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.apply(crds, false); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
	var crdNames []string
	for _, crd := range docs(t, crds) {
		crdNames = append(crdNames, kube.MetaString(crd, "name"))
	}
	c.WaitEstablished(t, adminUser, crdNames...)
	// A dry run does not create the namespace, and objects in a namespace
	// that does not exist are refused: create them for real. They enforce
	// the restricted Pod Security level (as deploy/k8s's namespace does)
	// and warn about it, so a pod template that breaks it is reported.
	for _, ns := range []string{"fencegate", "ops"} {
		doc := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n"+
			"    pod-security.kubernetes.io/enforce: restricted\n    pod-security.kubernetes.io/warn: restricted\n", ns)
		if _, err := c.apply([]byte(doc), false); err != nil {
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
			warnings, err := c.apply(renderings[name], true)
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
			warnings, err := c.apply(broken, true)
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
