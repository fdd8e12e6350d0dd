package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
)

func loadArgs(t *testing.T, args ...string) (config.Config, serveSettings, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	build := config.FlagsFile(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return loadServeConfig(build, func(string) string { return "" })
}

// TestServeConfigListsEveryProblem: what the packages parse (the store URL,
// token operations, admission enums) is reported in the same list as
// config's own problems, before anything is opened.
func TestServeConfigListsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not read while loading"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte(`store: redis://user:hunter2@127.0.0.1:1/0?nosuch=1
grpc: {addr: nonsense}
tokens:
  - name: ci
    sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    operations: [acquire, fly]
admission:
  addr: 127.0.0.1:0
  tls: {certFile: `+filepath.Join(dir, "tls.crt")+`, keyFile: `+filepath.Join(dir, "tls.key")+`}
  policy: sometimes
  mode: dryrun
  resources: ["a/b/c/d"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := loadArgs(t, "--config", path)
	var p config.Problems
	if !errors.As(err, &p) {
		t.Fatalf("want config.Problems, got %v", err)
	}
	for _, want := range []string{"grpc.addr", "store: ", "nosuch", `unknown operation "fly"`, "admission: policy", "sometimes", "admission: resources"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems do not mention %q:\n%v", want, err)
		}
	}
	for _, never := range []string{"hunter2", "admission: mode"} { // dryrun is fencecheck's spelling too
		if strings.Contains(err.Error(), never) {
			t.Errorf("problems mention %q:\n%v", never, err)
		}
	}
}

// TestServeConfigZeroIsPackageDefault: the defaults leave package settings
// zero, and they parse: the store URL is the embedded store's.
func TestServeConfigZeroIsPackageDefault(t *testing.T) {
	cfg, set, err := loadArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	if set.store.backend != "bolt" || set.auth != nil || cfg.Check.Timeout != 0 {
		t.Fatalf("defaults: %+v %+v", set, cfg)
	}
}

// TestStoreTable: every scheme reaches its backend; unknown schemes and
// bad parameters are errors that never print a password.
func TestStoreTable(t *testing.T) {
	for raw, want := range map[string]string{
		"bolt://./x.db":                                 "bolt",
		"bolt://./x.db?records=json":                    "bolt",
		"redis://127.0.0.1:6379/0":                      "redis",
		"rediss://127.0.0.1:6379/0":                     "redis",
		"redis+sentinel://127.0.0.1:26379/0?master=m":   "redis",
		"rediss+sentinel://127.0.0.1:26379/0?master=m":  "redis",
		"redis+cluster://127.0.0.1:7000,127.0.0.1:7001": "redis",
		"rediss+cluster://127.0.0.1:7000/?prefix=app":   "redis",
		"postgres://h/db":                               "postgres",
		"postgresql://h/db":                             "postgres",
		"firestore://project":                           "firestore",
	} {
		u, err := parseStoreURL(raw)
		if err != nil || u.backend != want {
			t.Errorf("%s: backend %q, %v; want %s", raw, u.backend, err, want)
		}
	}
	for _, raw := range []string{"", "bolt://./x.db?records=xml", "mysql://u:hunter2@h/db", "redis://u:hunter2@h:1/0?nosuch=1", "postgres://u:hunter2@h/db?autoMigrate=perhaps"} {
		_, err := parseStoreURL(raw)
		if err == nil {
			t.Errorf("%q parsed", raw)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: error shows the password: %v", raw, err)
		}
	}
	if u, _ := parseStoreURL("postgres://h/db"); u.migrate == nil {
		t.Error("postgres has no migrate hook")
	}
	if u, _ := parseStoreURL("bolt://./x.db"); u.migrate != nil {
		t.Error("bolt has a migrate hook")
	}
}

// TestMergeRetention: the store URL's retention wins field by field, and the
// config file fills the rest, the input class's budget included.
func TestMergeRetention(t *testing.T) {
	fromConfig := lockstore.AuditRetention{MaxEvents: 100, MaxInputEvents: 10, MaxAge: time.Hour}
	got := mergeRetention(lockstore.AuditRetention{MaxEvents: 5}, fromConfig)
	want := lockstore.AuditRetention{MaxEvents: 5, MaxInputEvents: 10, MaxAge: time.Hour}
	if got != want {
		t.Fatalf("mergeRetention = %+v, want %+v", got, want)
	}
}

// TestAccessLogConfig: log.access is parsed by the api package where serve
// builds its options: empty is api's default (errors), each name maps to
// its mode, and anything else is a configuration problem.
func TestAccessLogConfig(t *testing.T) {
	for arg, want := range map[string]lockserver.AccessLog{"": lockserver.AccessErrors, "off": lockserver.AccessOff, "errors": lockserver.AccessErrors, "all": lockserver.AccessAll} {
		var args []string
		if arg != "" {
			args = []string{"--log-access", arg}
		}
		_, set, err := loadArgs(t, args...)
		if err != nil || set.accessLog != want {
			t.Errorf("%v: access log %v, err %v; want %v", args, set.accessLog, err, want)
		}
	}
	_, _, err := loadArgs(t, "--log-access", "verbose")
	if err == nil || !strings.Contains(err.Error(), "log.access") {
		t.Fatalf("want a log.access problem, got %v", err)
	}
}
