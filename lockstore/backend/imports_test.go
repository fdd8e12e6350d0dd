package backend

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fencegate/fencegate"

// kitImporters returns the packages of listing (go list lines
// "path|imports|test imports") that import this package where they may not:
// non-test code only under lockstore/ (the backends, storetest) and
// internal/testutil/; test code also in bench and e2e, which configure
// stores (FloorOff) and compute expected fences (FenceFloorAt).
func kitImporters(listing string) []string {
	const kit = module + "/lockstore/backend"
	within := func(path string, roots ...string) bool {
		for _, r := range roots {
			if path == module+"/"+r || strings.HasPrefix(path, module+"/"+r+"/") {
				return true
			}
		}
		return false
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 || f[0] == kit {
			continue
		}
		path := f[0]
		if slices.Contains(strings.Fields(f[1]), kit) && !within(path, "lockstore", "internal/testutil") {
			bad = append(bad, path)
		}
		if slices.Contains(strings.Fields(f[2]), kit) && !within(path, "lockstore", "internal/testutil", "bench", "e2e") {
			bad = append(bad, path+" (tests)")
		}
	}
	return bad
}

// TestOnlyBackendsImportKit: the kit stays the backends' (issue 27): no
// transport, fencecheck, api, lock, client or command imports it.
func TestOnlyBackendsImportKit(t *testing.T) {
	cmd := exec.Command("go", "list", "-e", "-f",
		`{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if !strings.Contains(string(out), module+"/lockstore/bolt|") {
		t.Fatalf("go list did not list the module's packages:\n%.2000s", out)
	}
	if bad := kitImporters(string(out)); len(bad) > 0 {
		t.Errorf("lockstore/backend is for backends; imported by %v", bad)
	}
}

// TestKitImportersCatches: the check above can fail: a consumer importing
// the kit, in code or in tests, is reported; backends and helpers are not.
func TestKitImportersCatches(t *testing.T) {
	kit := module + "/lockstore/backend"
	for _, c := range []struct {
		line string
		want []string
	}{
		{module + "/lockstore/bolt|" + kit + "|", nil},
		{module + "/internal/testutil/locktest|" + kit + "|", nil},
		{module + "/e2e||" + kit, nil},
		{module + "/fencecheck|context " + kit + "|", []string{module + "/fencecheck"}},
		{module + "/api||" + kit, []string{module + "/api (tests)"}},
		{module + "/lockstorex|" + kit + "|", []string{module + "/lockstorex"}},
	} {
		if got := kitImporters(c.line); !slices.Equal(got, c.want) {
			t.Errorf("kitImporters(%q) = %v, want %v", c.line, got, c.want)
		}
	}
}
