package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// TestCheckCommand: `fencegate check` asks the gateway the edge's question
// and answers with its exit code: 0 allowed, 1 denied; --policy latest
// accepts the latest fence after its lock expired, holder does not.
func TestCheckCommand(t *testing.T) {
	g := StartGateway(t, "bolt://"+filepath.Join(t.TempDir(), "fg.db"))
	run := func(args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(binary, append([]string{"check", "--server", g.URL()}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("fencegate check: %v", err)
		return "", -1
	}
	r := Do(t, g.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"jobs/1","ttlMs":500}`})
	fence, _ := r.JSON["fence"].(string)
	if fence == "" {
		t.Fatalf("acquire: %d %s", r.Status, r.Body)
	}
	if out, code := run("--key", "jobs/1", "--fence", fence); code != 0 || !strings.Contains(out, `"allowed":true`) {
		t.Fatalf("current fence: exit %d\n%s", code, out)
	}
	issued, err := lockstore.ParseFence(fence)
	if err != nil {
		t.Fatal(err)
	}
	never, _ := lockstore.FormatFence(issued + 1000)
	if out, code := run("--key", "jobs/1", "--fence", never); code != 1 || !strings.Contains(out, `"unknown"`) {
		t.Fatalf("never-issued fence: exit %d\n%s", code, out)
	}
	time.Sleep(500*time.Millisecond + 1500*time.Millisecond) // TTL + the 1 s liveness tolerance + margin
	out, code := run("--key", "jobs/1", "--fence", fence)
	var denial map[string]any
	if code != 1 || json.Unmarshal([]byte(out), &denial) != nil || denial["error"] != "not-held" {
		t.Fatalf("expired lock under holder: exit %d\n%s", code, out)
	}
	if out, code := run("--key", "jobs/1", "--fence", fence, "--policy", "latest"); code != 0 {
		t.Fatalf("expired lock under latest: exit %d\n%s", code, out)
	}
	if _, code := run("--fence", fence); code != 2 {
		t.Fatalf("no --key: exit %d, want 2", code)
	}
}
