package kube_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/deploy/helm"
)

// kubectl runs kubectl against the cluster as the admin, with stdin, and
// returns stdout and stderr (kubectl prints the API server's warnings there).
func (c *cluster) kubectl(t *testing.T, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin, lerr := exec.LookPath("kubectl")
	if lerr != nil {
		t.Fatalf("kubectl is not installed (make test needs it on PATH): %v", lerr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.kubeconfig(t)}, args...)...)
	cmd.Env = append(os.Environ(), "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// kubeconfig writes (once per test) a kubeconfig for the admin user.
func (c *cluster) kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-kubeconfig-%s", strings.TrimPrefix(c.url, "https://127.0.0.1:")))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: %s
      certificate-authority-data: %s
users:
  - name: admin
    user:
      token: %s
contexts:
  - name: e2e
    context: {cluster: e2e, user: admin}
current-context: e2e
`, c.url, base64.StdEncoding.EncodeToString(c.caPEM), c.tokens[adminUser])
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// dryRun applies manifests with a server-side dry run and strict field
// validation: the API server decodes, defaults, validates and admits every
// object (PodSecurity included) and stores nothing. It returns kubectl's
// error and its warnings.
func (c *cluster) dryRun(t *testing.T, manifests []byte, args ...string) (warnings string, err error) {
	t.Helper()
	if manifests != nil {
		args = append(args, "-f", "-")
	}
	stdout, stderr, err := c.kubectl(t, manifests, append([]string{"apply", "--dry-run=server", "--validate=strict"}, args...)...)
	if err != nil {
		return stderr, fmt.Errorf("kubectl apply --dry-run=server: %w\n%s%s", err, stdout, stderr)
	}
	return stderr, nil
}

// TestChartServerSideDryRun renders the Helm chart with every variant of its
// values and has a real kube-apiserver validate the result, and does the same
// for deploy/k8s through kubectl's kustomize. cert-manager and Prometheus
// Operator are not installed on the bare API server: testdata/crds.yaml gives
// it minimal CRDs for Certificate, Issuer and ServiceMonitor so those objects
// are validated too (against our schema of the fields the chart uses).
func TestChartServerSideDryRun(t *testing.T) {
	c := startCluster(t)
	crds, err := os.ReadFile("testdata/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := c.kubectl(t, crds, "apply", "-f", "-"); err != nil {
		t.Fatalf("install CRDs: %v\n%s%s", err, out, stderr)
	}
	if out, stderr, err := c.kubectl(t, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io", "crd/servicemonitors.monitoring.coreos.com"); err != nil {
		t.Fatalf("CRDs not established: %v\n%s%s", err, out, stderr)
	}
	// A dry run does not create the namespace, and objects in a namespace
	// that does not exist are refused: create them for real, with the
	// Pod Security level deploy/k8s sets (helm install --create-namespace
	// would not label it; the pods must pass restricted anyway).
	// kubectl apply, so the later dry runs find kubectl's annotation.
	for _, ns := range []string{"fencegate", "ops"} {
		doc := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n"+
			"    pod-security.kubernetes.io/enforce: restricted\n    pod-security.kubernetes.io/warn: restricted\n", ns)
		if out, stderr, err := c.kubectl(t, []byte(doc), "apply", "-f", "-"); err != nil {
			t.Fatalf("create namespace %s: %v\n%s%s", ns, err, out, stderr)
		}
	}

	renderings := map[string][]byte{}
	for name, args := range helm.Variants() {
		out, err := helm.Template(context.Background(), "fencegate", "fencegate", args...)
		if err != nil {
			t.Fatal(err)
		}
		renderings[name] = out
	}
	out, err := helm.Template(context.Background(), "gate", "ops", helm.Required...)
	if err != nil {
		t.Fatal(err)
	}
	renderings["release gate in ops"] = out

	names := make([]string, 0, len(renderings))
	for n := range renderings {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			warnings, err := c.dryRun(t, renderings[name])
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(warnings, "Warning") {
				t.Errorf("the API server warned:\n%s", warnings)
			}
		})
	}
	t.Run("kustomize deploy/k8s", func(t *testing.T) {
		warnings, err := c.dryRun(t, nil, "-k", "../../deploy/k8s")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(warnings, "Warning") {
			t.Errorf("the API server warned:\n%s", warnings)
		}
	})

	// The dry run must refuse what is wrong, or passing it proves nothing.
	good := renderings["monitored, narrowed"]
	for _, tc := range []struct{ name, from, to, want string }{
		{"misspelt field", "\n    failurePolicy: Fail", "\n    failurPolicy: Fail", "failurPolicy"},
		{"root pod", "runAsNonRoot: true", "runAsNonRoot: false", "PodSecurity"},
		{"privileged escalation", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "PodSecurity"},
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
			warnings, err := c.dryRun(t, broken)
			msg := warnings
			if err != nil {
				msg = err.Error()
			}
			if (err == nil && !strings.Contains(warnings, "Warning")) || !strings.Contains(msg, tc.want) {
				t.Fatalf("the broken rendering passed the dry run (err %v, warnings %q); want a complaint about %s", err, warnings, tc.want)
			}
		})
	}
}
