package mesh_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/mesh"
)

var update = flag.Bool("update", false, "rewrite the shipped manifests from routes.yaml")

// shippedRoutes is routes.yaml, read with the project's config loader.
func shippedRoutes(t *testing.T) []config.Route {
	t.Helper()
	c := config.Default()
	if err := c.LoadFile("routes.yaml"); err != nil {
		t.Fatal(err)
	}
	if len(c.Routes) == 0 {
		t.Fatal("routes.yaml has no routes")
	}
	return c.Routes
}

// TestShippedManifests fails when a shipped manifest under deploy/ differs
// from the generator's output for routes.yaml: the mesh's matches and the
// table fencegate enforces must not drift. -update rewrites them.
func TestShippedManifests(t *testing.T) {
	files, err := mesh.Shipped(shippedRoutes(t), mesh.ShippedOptions)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		full := filepath.Join("..", filepath.FromSlash(path))
		if *update {
			if err := os.WriteFile(full, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(full)
		if err != nil {
			t.Fatalf("%v (run `go test ./deploy/mesh -run 'TestShippedManifests$' -args -update`)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/%s differs from the generator's output for routes.yaml: run `go test ./deploy/mesh -run 'TestShippedManifests$' -args -update`", path)
		}
	}
}
