package firestore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// testProject is this package's own emulator project, so resetting it never
// touches data of other packages' tests sharing the emulator.
const testProject = "fencegate-lockstore-firestore-test"

const emulatorHelp = "FIRESTORE_EMULATOR_HOST is not set. Run the tests with `make test` " +
	"(scripts/testenv starts the emulator and exports it), or start the emulator yourself:\n" +
	"  java -cp /usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar " +
	"com.google.cloud.datastore.emulator.firestore.CloudFirestore start --host=127.0.0.1 --port=PORT\n" +
	"  export FIRESTORE_EMULATOR_HOST=127.0.0.1:PORT\n" +
	"(the jar ships with the Google Cloud SDK component cloud-firestore-emulator; it needs Java 17)"

var resetOnce sync.Once

// needEmulator fails the test — never skips it — when no emulator is
// configured, and clears this package's project once per test binary so
// repeated runs against a long-lived emulator do not pile up documents.
func needEmulator(t testing.TB) string {
	t.Helper()
	testutil.NeedService(t, "the Firestore emulator (FIRESTORE_EMULATOR_HOST)")
	host := os.Getenv("FIRESTORE_EMULATOR_HOST")
	if host == "" {
		t.Fatal(emulatorHelp)
	}
	var resetErr error
	resetOnce.Do(func() {
		url := fmt.Sprintf("http://%s/emulator/v1/projects/%s/databases/(default)/documents", host, testProject)
		req, err := http.NewRequest(http.MethodDelete, url, nil)
		if err != nil {
			resetErr = err
			return
		}
		// The first request to a freshly started emulator pays its JVM
		// warm-up; on a loaded 2-core machine that has exceeded 10 s.
		c := http.Client{Timeout: time.Minute}
		resp, err := c.Do(req)
		if err != nil {
			resetErr = fmt.Errorf("emulator at %s unreachable: %w", host, err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			resetErr = fmt.Errorf("reset: %s: %s", resp.Status, body)
		}
	})
	if resetErr != nil {
		t.Fatalf("Firestore emulator at %s: %v", host, resetErr)
	}
	return host
}

// nsConfig is the configuration of one test namespace: the namespace is a
// collection-name suffix ([a-z0-9_], as storetest promises), so namespaces
// never share documents.
func nsConfig(t testing.TB, ns string) Config {
	return Config{
		ProjectID:         testProject,
		Collection:        "locks_" + ns,
		FenceCollection:   "fence_counters_" + ns,
		AuditCollection:   "audit_" + ns,
		BarrierCollection: "writes_" + ns,
		Logger:            testLogger(t),
		// The emulator resolves conflicting transactions with a ~2 s lock
		// timeout; on a loaded machine a contended acquire can pass the 4 s
		// production bound. Tests of that bound set their own.
		OpTimeout: 30 * time.Second,
	}
}

// floorOff is cfg with backend.FloorOff, for the tests that pin the
// layout or count fences one by one (the floor's own cases are in the
// conformance suite).
func floorOff(cfg Config) Config {
	cfg.FenceFloor = backend.FloorOff
	return cfg
}

// openStore opens a store with cfg and closes it when the test ends.
func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	needEmulator(t)
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var nsSeq struct {
	sync.Mutex
	n int
}

// uniqueNS returns a fresh namespace for a test of this file.
func uniqueNS(t testing.TB) string {
	nsSeq.Lock()
	defer nsSeq.Unlock()
	nsSeq.n++
	name := strings.ToLower(t.Name())
	var b strings.Builder
	for _, r := range name {
		if b.Len() >= 16 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return fmt.Sprintf("%s_%d_%d", b.String(), time.Now().UnixNano()%1e9, nsSeq.n)
}

// setFence seeds the counter of key to n by writing the counter document,
// exactly as a SyncGuard client or an operator would find it.
func setFence(t testing.TB, s *Store, key string, n int64) {
	t.Helper()
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		t.Fatalf("setFence: %v", err)
	}
	_, fid, err := docIDs(nk)
	if err != nil {
		t.Fatalf("setFence: %v", err)
	}
	if _, err := s.fences.Doc(fid).Set(context.Background(), counterDoc{Fence: fmt.Sprintf("%015d", n), KeyDebug: nk}); err != nil {
		t.Fatalf("setFence: %v", err)
	}
}

// testLogger sends the store's log lines to the test log, and records them
// so tests can assert on warnings.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
