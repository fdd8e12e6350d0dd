package routereload

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/routes"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestRestartKeys: a reload names the keys it did not apply, and only
// those: routes: and check.unmatchedWrites are applied.
func TestRestartKeys(t *testing.T) {
	a := config.Default()
	b := config.Default()
	b.Routes = []config.Route{{Name: "x"}}
	b.Check.UnmatchedWrites = "defaults"
	if got := restartKeys(a, b); len(got) != 0 {
		t.Errorf("applied keys reported: %v", got)
	}
	b.Store = "redis://x"
	b.Check.Timeout = config.Duration(time.Second)
	b.Routes = append(b.Routes, config.Route{Name: "y", Upstream: "http://u"})
	got := strings.Join(restartKeys(a, b), ",")
	for _, want := range []string{"store", "check", "upstream entries"} {
		if !strings.Contains(got, want) {
			t.Errorf("restartKeys = %s, lacks %s", got, want)
		}
	}
}

// TestReloadKeepsTheTable: a reload whose file lost its routes: (a YAML
// slip) keeps the served table, as does one that raises an entry's
// maxWait together with check.maxWaitCap (the cap is restart-only, so the
// running checker would refuse every write of it); both count as failed
// reloads. A good edit applies. The broken variant (the reloader without
// these refusals) is what swapped in nil or the capped table before.
func TestReloadKeepsTheTable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fencegate.yaml")
	write := func(body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const table = "routes:\n  - {name: w, match: {path: {value: /w}}, key: w, barrier: true, maxWait: 2s}\n"
	write(table)
	loaded, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := Compile(&loaded.Config)
	if err != nil || tbl == nil {
		t.Fatal(tbl, err)
	}
	h := routes.NewHolder(tbl)
	reg := prometheus.NewRegistry()
	r := New(loaded, nil, h, reg, discardLogger())
	failed := func() float64 { return promtest.ToFloat64(r.reloads.WithLabelValues("error")) }

	write("log: {level: info}\n")
	r.reload("test")
	if h.Load() != tbl || failed() != 1 {
		t.Fatalf("an emptied routes: replaced the table (served %v, failures %v)", h.Load(), failed())
	}
	write("check: {maxWaitCap: 1m}\n" + strings.Replace(table, "maxWait: 2s", "maxWait: 45s", 1))
	r.reload("test")
	if h.Load() != tbl || failed() != 2 {
		t.Fatalf("a maxWait above the running cap was applied (failures %v)", failed())
	}
	// Signed proofs on a gateway started without a key: every write would
	// be refused 503, and the next restart would not start. Keys added to
	// the file beside it do not count: the running checker has none.
	write("proof: {verifyKeys: [{kid: k, publicKey: " + strings.Repeat("A", 43) + "}]}\n" + strings.Replace(table, "key: w", "key: w, proof: signed", 1))
	r.reload("test")
	if h.Load() != tbl || failed() != 3 {
		t.Fatalf("an entry asking for signed proofs of a keyless gateway was applied (failures %v)", failed())
	}
	write(strings.Replace(table, "key: w", "key: v", 1))
	r.reload("test")
	if got := h.Load(); got == tbl || got.Named("w") == nil || got.Named("w").Config.Key != "v" || failed() != 3 {
		t.Fatalf("a good edit was not applied (failures %v)", failed())
	}
}

// TestStartFileIsWhatAReloadReads: serve reads its config file once
// (config.FlagsFile) and hands that one read to the reloader. The file it
// hands over must be what a reload of the unchanged files loads — the file
// alone over the defaults, its routesFile included, whatever
// FENCEGATE_* variables and flags set — and hash alike, or the reloader
// would reload at start (a hash that differs) or report restart-only keys
// on every reload (a config with the variables' values). The broken
// variants (the effective config handed over; the content not kept) are
// caught.
func TestStartFileIsWhatAReloadReads(t *testing.T) {
	dir := t.TempDir()
	path, routesPath := filepath.Join(dir, "fencegate.yaml"), filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routesPath, []byte("routes:\n  - {name: inc, match: {path: {value: /inc}}, key: inc}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	body := "store: bolt:///tmp/a.db\nroutesFile: " + routesPath + "\nroutes:\n  - {name: w, match: {path: {value: /w}}, key: w}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	build := config.FlagsFile(fs)
	if err := fs.Parse([]string{"--config", path, "--http-addr", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FENCEGATE_STORE": "bolt:///tmp/b.db"}
	cfg, file, err := build(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store != "bolt:///tmp/b.db" || cfg.HTTP.Addr != "127.0.0.1:0" || len(cfg.Routes) != 2 {
		t.Fatalf("the effective config lost a layer: store %q, http %q, %d routes", cfg.Store, cfg.HTTP.Addr, len(cfg.Routes))
	}
	reread, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		file config.File
		ok   bool
	}{
		{"one read", file, true},
		{"broken: the effective config handed over", config.File{Path: file.Path, Content: file.Content, Config: cfg}, false},
		{"broken: the content not kept", config.File{Path: file.Path, Config: file.Config}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, err := Compile(&tc.file.Config)
			if err != nil {
				t.Fatal(err)
			}
			r := New(tc.file, nil, routes.NewHolder(tbl), prometheus.NewRegistry(), discardLogger())
			now, err := r.currentSum()
			if err != nil {
				t.Fatal(err)
			}
			keys := restartKeys(tc.file.Config, reread.Config)
			ok := now == r.sum && len(keys) == 0 && tbl.Len() == 2
			if ok != tc.ok {
				t.Fatalf("same hash %v, restart-only keys %v, %d entries: handed over as a reload reads it %v, want %v",
					now == r.sum, keys, tbl.Len(), ok, tc.ok)
			}
		})
	}
}

// TestDrainFollowsTheTable: a reload that adds a barrier upstream entry, or
// lengthens its maxWrite, lengthens the drain a shutdown gives in-flight
// barrier writes (Reloader.Drain, serving.Group.DrainAtLeast): the drain
// fixed at start would cut them before their maxWrite. The broken variant
// (the drain as the start computed it) is what the start value shows.
func TestDrainFollowsTheTable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fencegate.yaml")
	write := func(body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("routes:\n  - {name: a, match: {path: {value: /a}}, key: a, upstream: 'http://127.0.0.1:9'}\n")
	loaded, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := Compile(&loaded.Config)
	if err != nil {
		t.Fatal(err)
	}
	r := New(loaded, nil, routes.NewHolder(tbl), prometheus.NewRegistry(), discardLogger())
	atStart := r.Drain()
	if atStart != loaded.Config.Drain() {
		t.Fatalf("Drain = %v at start, want the file's %v", atStart, loaded.Config.Drain())
	}
	write("routes:\n  - {name: a, match: {path: {value: /a}}, key: a, upstream: 'http://127.0.0.1:9', barrier: true, maxWrite: 2m, maxWait: 10s}\n")
	r.reload("test")
	want := 2*time.Minute + 10*time.Second + 5*time.Second
	if got := r.Drain(); got != want {
		t.Fatalf("Drain after a reload that added a 2m barrier entry = %v, want %v", got, want)
	}
	if atStart >= want {
		t.Fatalf("the start's drain %v already covers the reloaded entry: the test shows nothing", atStart)
	}
}
