package testutil_test

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestNotInBinary: test helpers are never linked into the gateway. A
// package of the binary that imported testutil would put it (and the OTel
// SDK's in-memory exporter) in this list. The broken variant, a blank
// import of testutil in config, fails this test and
// TestImportedOnlyByTests.
func TestNotInBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/fencegate/fencegate/cmd/fencegate").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/fencegate: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 20 || !contains(deps, "github.com/fencegate/fencegate/lockstore") {
		t.Fatalf("go list -deps ./cmd/fencegate listed %d packages without lockstore; the check would prove nothing:\n%s", len(deps), out)
	}
	for _, bad := range []string{"github.com/fencegate/fencegate/internal/testutil", "github.com/fencegate/fencegate/internal/testutil/locktest",
		"github.com/fencegate/fencegate/internal/testutil/redistest",
		"github.com/fencegate/fencegate/lockstore/storetest"} {
		if contains(deps, bad) {
			t.Errorf("cmd/fencegate links %s: a production package imports test-only code", bad)
		}
	}
	// The check itself catches an import: the test binary of this package
	// does depend on testutil.
	out, err = exec.Command("go", "list", "-deps", "-test", "github.com/fencegate/fencegate/internal/testutil/locktest").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if !contains(strings.Fields(string(out)), "github.com/fencegate/fencegate/lockstore/bolt") {
		t.Errorf("go list -deps of locktest does not list lockstore/bolt; the dependency listing is not what this test assumes:\n%s", out)
	}
}

// TestImportedOnlyByTests: outside _test.go files only test-support
// packages (named for it: storetest, nginxtest, locktest, ...) import
// testutil, so no package of a binary can come to depend on it through
// another. The listing must see storetest's import, or it proves nothing.
func TestImportedOnlyByTests(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/fencegate/fencegate/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const self = "github.com/fencegate/fencegate/internal/testutil"
	var importers []string
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == self || strings.HasPrefix(imp, self+"/") {
				importers = append(importers, fields[0])
				break
			}
		}
	}
	if !contains(importers, "github.com/fencegate/fencegate/lockstore/storetest") {
		t.Fatalf("go list does not show storetest importing testutil; the check would prove nothing: %v", importers)
	}
	for _, p := range importers {
		if !strings.HasSuffix(p, "test") {
			t.Errorf("%s imports testutil outside a _test.go file and is not a test-support package", p)
		}
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func TestLogBuffer(t *testing.T) {
	var b testutil.LogBuffer
	log := testutil.Logger(&b, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { log.Info("line", "i", i) })
	}
	wg.Wait()
	if n := len(b.Lines()); n != 8 {
		t.Fatalf("%d lines, want 8:\n%s", n, b.String())
	}
	b.Reset()
	if b.String() != "" || b.Lines() != nil {
		t.Fatalf("after Reset: %q", b.String())
	}
}

func TestListenAndFreePort(t *testing.T) {
	l := testutil.Listen(t)
	if !strings.HasPrefix(l.Addr().String(), "127.0.0.1:") {
		t.Fatalf("Listen on %s, want loopback", l.Addr())
	}
	if p := testutil.FreePort(t); p <= 0 || p > 65535 {
		t.Fatalf("FreePort = %d", p)
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	testutil.WaitFor(t, 5*time.Second, "the third poll", func() bool { n++; return n == 3 })
	// A condition that never holds fails after the bound (checked in a
	// recorder, as testing.T's Fatalf cannot be caught).
	r := &fatalRecorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testutil.WaitFor(r, 20*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if !strings.Contains(r.msg, "waited 20ms for never") {
		t.Fatalf("WaitFor of a condition that never holds reported %q", r.msg)
	}
}

type fatalRecorder struct {
	*testing.T
	msg string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestClock(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	c := testutil.NewClock(t0)
	c.Advance(1500 * time.Millisecond)
	if got := c.Now().Sub(t0); got != 1500*time.Millisecond {
		t.Fatalf("after Advance(1.5s): %v", got)
	}
	c.Set(t0)
	if !c.Now().Equal(t0) {
		t.Fatalf("after Set: %v", c.Now())
	}
}

func TestRecordSpans(t *testing.T) {
	exp := testutil.RecordSpans(t)
	if exp == nil || len(exp.GetSpans()) != 0 {
		t.Fatal("RecordSpans: want an empty exporter")
	}
}

// TestWriteLedger: two fences of a key in flight at once are an overlap,
// a commit under a lower fence after a higher one is a backward commit,
// and neither is counted for one fence or across keys.
func TestWriteLedger(t *testing.T) {
	var l testutil.WriteLedger
	a := l.Begin("k", "000000000000002")
	b := l.Begin("k", "000000000000002") // same fence: no overlap
	o := l.Begin("other", "000000000000001")
	if ov, bw := l.Counts(); ov != 0 || bw != 0 {
		t.Fatalf("counts %d, %d; want 0, 0", ov, bw)
	}
	a()
	b()
	o()
	older := l.Begin("k", "000000000000001")
	newer := l.Begin("k", "000000000000003") // 001 still in flight: an overlap
	newer()
	older() // commits 001 after 003: backwards
	if ov, bw := l.Counts(); ov != 1 || bw != 1 {
		t.Fatalf("counts %d, %d; want 1 overlap, 1 backward commit", ov, bw)
	}
}
