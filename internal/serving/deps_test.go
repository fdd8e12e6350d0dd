package serving

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fencegate/fencegate/"

// TestArrowsPointOneWay: the listeners (serving, connlimit) and the route
// table's reloader are libraries cmd/fencegate wires: they import no
// transport and no command, and no transport, library or client imports
// them. A listing that holds neither our packages nor the ones checked
// fails the test rather than passing it empty.
func TestArrowsPointOneWay(t *testing.T) {
	ours := []string{"internal/serving", "internal/connlimit", "internal/routereload"}
	for _, tc := range []struct {
		name      string
		pkgs      []string
		present   []string // must be listed: the scan sees what it checks
		forbidden []string
	}{
		{"they import no transport or command", []string{".", "../connlimit", "../routereload"}, ours,
			[]string{"lockserver", "authz", "admission", "proxy", "internal/console", "internal/fencepolicy", "cmd/fencegate"}},
		{"no transport or library imports them", []string{"../../lockserver", "../../authz", "../../admission", "../../proxy", "../../routes",
			"../../fencecheck", "../../lockstore/...", "../../lock", "../../client", "../../fenceguard/...", "../console"},
			[]string{"lockserver", "authz", "admission", "proxy", "routes", "fencecheck", "lockstore"}, ours},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command("go", append([]string{"list", "-deps"}, tc.pkgs...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %v: %v\n%s", tc.pkgs, err, out)
			}
			var deps []string
			for _, d := range strings.Fields(string(out)) {
				if p, ok := strings.CutPrefix(d, module); ok {
					deps = append(deps, p)
				}
			}
			for _, p := range tc.present {
				if !slices.Contains(deps, p) {
					t.Fatalf("go list -deps %v lacks %s: not what this test assumes (%v)", tc.pkgs, p, deps)
				}
			}
			for _, f := range tc.forbidden {
				if slices.Contains(deps, f) {
					t.Errorf("%v import %s", tc.pkgs, f)
				}
			}
		})
	}
}
