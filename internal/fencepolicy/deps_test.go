package fencepolicy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsStayOut: what `lock`, `client` and `fenceguard` users import
// links neither the controller nor any Kubernetes client library, and the
// controller itself links no client-go or controller-runtime.
func TestDepsStayOut(t *testing.T) {
	for _, tc := range []struct {
		pkgs      []string
		forbidden []string
	}{
		{[]string{"../../lock", "../../client", "../../fenceguard/..."}, []string{"internal/fencepolicy", "k8s.io/client-go", "sigs.k8s.io/controller-runtime", "k8s.io/apimachinery"}},
		{[]string{"."}, []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime"}},
	} {
		out, err := exec.Command("go", append([]string{"list", "-deps"}, tc.pkgs...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %v: %v\n%s", tc.pkgs, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 20 || !strings.Contains(string(out), "github.com/fencegate/fencegate/") {
			t.Fatalf("go list -deps %v listed %d packages: not what this test assumes", tc.pkgs, len(deps))
		}
		for _, d := range deps {
			for _, f := range tc.forbidden {
				if strings.Contains(d, f) {
					t.Errorf("%v import %s", tc.pkgs, d)
				}
			}
		}
	}
}
