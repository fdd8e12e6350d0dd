package kube_test

import (
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/fencegate/fencegate/cmd/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"time"
)

// TestAnnotateCLIThroughKubeAPIServer: a kubectl-driven job stamps its
// writes with `fencegate lock annotate --patch` (FENCE_KEY/FENCE_TOKEN as
// `fencegate lock run` exports them) and the API server admits the patch
// while its fence is current, and refuses it once superseded.
func TestAnnotateCLIThroughKubeAPIServer(t *testing.T) {
	testutil.NeedService(t, "kube-apiserver and etcd (make kube-bins)")
	bin, err := fencegatetest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fencegatetest.Cleanup)
	annotatePatch := func(fence string) []byte {
		t.Helper()
		cmd := exec.Command(bin, "lock", "annotate", "--patch")
		cmd.Env = append(os.Environ(), "FENCE_KEY="+orderKey, "FENCE_TOKEN="+fence)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("fencegate lock annotate --patch: %v", err)
		}
		return out
	}

	c := startCluster(t)
	g := startGate(t, fencecheck.ModeEnforce)
	setUp(t, c, g)

	first := locktest.Acquire(t, g.store, orderKey, 10*time.Minute)
	if code, s := c.write(t, writerUser, http.MethodPost, "", configMap("annotated", stamped(first.Fence), "v1"), false); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, s.raw)
	}
	locktest.Release(t, g.store, first.LockID)
	second := locktest.Acquire(t, g.store, orderKey, 10*time.Minute)

	path := "/api/v1/namespaces/" + namespace + "/configmaps/annotated"
	code, raw, err := c.do(t.Context(), writerUser, http.MethodPatch, path, annotatePatch(second.Fence), "application/merge-patch+json")
	if err != nil || code != http.StatusOK {
		t.Fatalf("patch with the current fence: %d %s %v", code, raw, err)
	}
	if _, ann := c.state(t, "annotated"); ann["fencegate.io/fence"] != second.Fence {
		t.Fatalf("annotations after patch: %v", ann)
	}
	code, raw, err = c.do(t.Context(), writerUser, http.MethodPatch, path, annotatePatch(first.Fence), "application/merge-patch+json")
	if err != nil || code != http.StatusConflict {
		t.Fatalf("patch with the superseded fence: %d %s %v, want 409", code, raw, err)
	}
}
