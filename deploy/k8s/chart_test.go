package k8s_test

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/deploy/helm"
	"github.com/fencegate/fencegate/deploy/k8s"
	"github.com/fencegate/fencegate/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite deploy/k8s from the Helm chart (make k8s-manifests)")

// generatedHeader starts every rendered file.
const generatedHeader = "# Generated from the Helm chart deploy/helm/fencegate by `make k8s-manifests`\n" +
	"# (values: deploy/helm/values-k8s.yaml). Edit the chart, then regenerate.\n"

const kustomizationHead = `# kubectl apply -k deploy/k8s   (cert-manager must be installed first, or see
# RUNBOOK.md for clusters without it)
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
`

// renderK8s renders the chart as deploy/k8s holds it: file name → content.
func renderK8s(t *testing.T) (order []string, files map[string]string) {
	testutil.NeedService(t, "helm (make helm-bin)")
	t.Helper()
	out, err := helm.Template(context.Background(), "fencegate", "fencegate", "-f", "../helm/values-k8s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names, bySource := helm.Sources(out)
	files = map[string]string{}
	for _, n := range names {
		f := path.Base(n)
		order = append(order, f)
		files[f] = generatedHeader + bySource[n]
	}
	var k strings.Builder
	k.WriteString(kustomizationHead)
	for _, f := range order {
		fmt.Fprintf(&k, "  - %s\n", f)
	}
	files["kustomization.yaml"] = k.String()
	return order, files
}

// deploy/k8s is the chart rendered with values-k8s.yaml: one source of
// truth. This fails when someone edits one and not the other;
// `make k8s-manifests` rewrites deploy/k8s.
func TestManifestsRenderedFromChart(t *testing.T) {
	_, want := renderK8s(t)
	if *update {
		old, _ := fs.Glob(k8s.Files, "*.yaml")
		for _, f := range old {
			if _, ok := want[f]; !ok {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}
		for f, content := range want {
			if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for _, p := range drift(want, k8s.Files) {
		t.Error(p)
	}
}

// drift lists the differences between the rendering and the files.
func drift(want map[string]string, files fs.FS) []string {
	var problems []string
	have, _ := fs.Glob(files, "*.yaml")
	for _, f := range have {
		if _, ok := want[f]; !ok {
			problems = append(problems, fmt.Sprintf("deploy/k8s/%s is not rendered from the chart: move it into deploy/helm/fencegate/templates and run make k8s-manifests", f))
		}
	}
	for f, content := range want {
		got, err := fs.ReadFile(files, f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("deploy/k8s/%s is missing: run make k8s-manifests", f))
			continue
		}
		if string(got) != content {
			problems = append(problems, fmt.Sprintf("deploy/k8s/%s differs from the chart's rendering (%s): run make k8s-manifests", f, firstDiff(string(got), content)))
		}
	}
	return problems
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: file %q, chart %q", i+1, gl, wl)
		}
	}
	return "same lines"
}

// The drift check must catch an edit on either side.
func TestDriftIsCaught(t *testing.T) {
	// A rendering identical to the files, then edited.
	want := map[string]string{}
	names, _ := fs.Glob(k8s.Files, "*.yaml")
	for _, f := range names {
		b, err := k8s.Files.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want[f] = string(b)
	}
	if p := drift(want, k8s.Files); len(p) != 0 {
		t.Fatalf("identical files drifted: %v", p)
	}
	want["webhook.yaml"] = strings.Replace(want["webhook.yaml"], "failurePolicy: Fail", "failurePolicy: Ignore", 1)
	if p := drift(want, k8s.Files); len(p) != 1 || !strings.Contains(p[0], "webhook.yaml") {
		t.Errorf("a changed rendering gave %v", p)
	}
	delete(want, "webhook.yaml")
	if p := drift(want, k8s.Files); len(p) != 1 || !strings.Contains(p[0], "not rendered from the chart") {
		t.Errorf("a file the chart does not render gave %v", p)
	}
	want["extra.yaml"] = "kind: ConfigMap\n"
	if p := drift(want, k8s.Files); len(p) != 2 {
		t.Errorf("a rendered file missing from deploy/k8s gave %v", p)
	}
}
