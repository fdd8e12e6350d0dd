package lockserver_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/admission"
	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
)

// These tests keep docs/api.md, the project's wire reference, honest: every
// name a client or an operator builds on (reasons and their statuses,
// LockError codes, route options, headers, paths, service names, metric
// names, console routes, OTEL_* variables, span names and attributes) that
// the code defines must appear in it. Adding one to the code
// without documenting it fails here.

const apiDoc = "../docs/api.md"

// docItem is one name the reference must contain.
type docItem struct {
	what, name string
	// loose: match case-insensitively as a word (header names are written
	// in canonical case or inside a `Header: value` span, paths after their
	// method: `POST /v1/locks/acquire`); otherwise the name must appear as a
	// code span, exactly: `name`.
	loose bool
	// row, when set, is a regexp a line of the doc must match (a table row
	// stating the name's value, such as a reason's status).
	row string
}

// docItems collects what the code defines, from the packages themselves and,
// where a new name would otherwise go unnoticed, from their source.
func docItems(t *testing.T) []docItem {
	t.Helper()
	var items []docItem
	add := func(what string, loose bool, names ...string) {
		for _, n := range names {
			items = append(items, docItem{what: what, name: n, loose: loose})
		}
	}
	for _, r := range fencecheck.Reasons {
		items = append(items, docItem{what: "reason", name: string(r),
			row: `^\| ` + regexp.QuoteMeta("`"+string(r)+"`") + ` \| ` + strconv.Itoa(fencecheck.StatusOf(r)) + `\b`})
	}
	for _, c := range lockstore.Codes {
		items = append(items, docItem{what: "LockError code", name: string(c),
			row: `^\| ` + regexp.QuoteMeta("`"+string(c)+"`") + ` \| ` + strconv.Itoa(wire.HTTPStatus(c)) + `\b`})
	}
	add("policy", false, string(fencecheck.PolicyHolder), string(fencecheck.PolicyLatest), string(fencecheck.PolicyOff))
	add("mode", false, string(fencecheck.ModeEnforce), string(fencecheck.ModeDryRun), string(fencecheck.ModeWarn))
	add("operation", false, string(auth.OpAcquire), string(auth.OpRelease), string(auth.OpExtend),
		string(auth.OpLookup), string(auth.OpStatus), string(auth.OpAudit), string(auth.OpUI))
	add("path", true, wire.PathAcquire, wire.PathRelease, wire.PathExtend, wire.PathLookup,
		wire.PathStatus, wire.PathAudit, wire.PathProofKeys, authz.HTTPPath, admission.Path, "/healthz", "/readyz", "/metrics")
	add("gRPC service", false, lockserver.LocksServiceName, authz.ServiceName, authz.ExtProcServiceName)
	add("audit source", false, authz.SourceGRPC, authz.SourceHTTP, authz.SourceExtProc, admission.Source, "proxy")
	add("annotation", false, admission.DefaultKeyAnnotation, admission.DefaultFenceAnnotation)

	// Route options and headers: every exported string constant named
	// Ext* or Header* in fencewire (and authz's HeaderCredential), read
	// from the source so a new one cannot be missed (HeaderPrefix is a
	// prefix, not a header).
	for _, c := range stringConsts(t, "../fencewire", "Ext") {
		add("route option", false, c)
	}
	for _, dir := range []string{"../fencewire", "../authz"} {
		for _, c := range stringConsts(t, dir, "Header") {
			if c != fencewire.HeaderPrefix {
				add("header", true, c)
			}
		}
	}
	for _, m := range metricNames(t) {
		add("metric", false, m)
	}
	// The console's routes (method and path, as registered), the OTEL_*
	// variables internal/tracing/otelenv reads, and the span names and attribute
	// keys of package tracing, all read from the source.
	add("console route", true, consoleRoutes(t)...)
	add("OTEL variable", false, otelVars(t)...)
	add("span name", true, stringConsts(t, "../internal/tracing", "Span")...)
	add("span attribute", false, stringConsts(t, "../internal/tracing", "Attr")...)
	return items
}

// sourceOf returns the non-test Go source of dir, one string per file.
func sourceOf(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

var (
	consolePathRE  = regexp.MustCompile(`\bPath\s*=\s*"([^"]+)"`)
	consoleRouteRE = regexp.MustCompile(`route\("([A-Z]+) "\s*\+\s*Path(?:\s*\+\s*"([^"]*)")?`)
	otelVarRE      = regexp.MustCompile(`"(OTEL_[A-Z0-9_]+)"`)
)

// consoleRoutes returns every route console.Register mounts, as
// "METHOD /path" ("/ui/{$}" written "/ui/", the form a reader types).
func consoleRoutes(t *testing.T) []string {
	t.Helper()
	var base string
	var methods, suffixes []string
	for _, src := range sourceOf(t, "../internal/console") {
		if m := consolePathRE.FindStringSubmatch(src); m != nil {
			base = m[1]
		}
		for _, m := range consoleRouteRE.FindAllStringSubmatch(src, -1) {
			methods = append(methods, m[1])
			suffixes = append(suffixes, strings.TrimSuffix(m[2], "{$}"))
		}
	}
	// A console with fewer routes than its pages, stream, login, logout
	// and assets means the scan no longer reads console.Register.
	if base == "" || len(methods) < 7 {
		t.Fatalf("found console path %q and %d routes: the scan of internal/console/ is broken", base, len(methods))
	}
	routes := make([]string, len(methods))
	for i := range methods {
		routes[i] = methods[i] + " " + base + suffixes[i]
	}
	return routes
}

// otelVars returns every OTEL_* variable internal/tracing/otelenv reads itself.
func otelVars(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, src := range sourceOf(t, "../internal/tracing/otelenv") {
		for _, m := range otelVarRE.FindAllStringSubmatch(src, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, m[1])
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d OTEL_* variables in internal/tracing/otelenv: the scan is broken", len(out))
	}
	return out
}

// missingFromDoc returns the items doc lacks, as "what name".
func missingFromDoc(doc string, items []docItem) []string {
	lines := strings.Split(doc, "\n")
	var missing []string
	for _, it := range items {
		var found bool
		if it.loose {
			re := regexp.MustCompile(`(?i)(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(it.name) + `($|[^A-Za-z0-9_-])`)
			found = re.MatchString(doc)
		} else {
			found = strings.Contains(doc, "`"+it.name+"`")
		}
		if found && it.row != "" {
			re := regexp.MustCompile(it.row)
			found = slices.ContainsFunc(lines, re.MatchString)
		}
		if !found {
			missing = append(missing, it.what+" "+it.name)
		}
	}
	return missing
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the API reference: %v", err)
	}
	return string(b)
}

func TestAPIDocNamesEverythingTheCodeDefines(t *testing.T) {
	items := docItems(t)
	if len(items) < 80 {
		t.Fatalf("collected only %d names from the code; the collection itself is broken", len(items))
	}
	for _, m := range missingFromDoc(readDoc(t, apiDoc), items) {
		t.Errorf("docs/api.md does not document the %s", m)
	}
}

// TestAPIDocCheckCatchesOmissions is the broken variant: a copy of the doc
// with one name taken out (every line naming it deleted) must be caught,
// for every name.
func TestAPIDocCheckCatchesOmissions(t *testing.T) {
	doc := readDoc(t, apiDoc)
	items := docItems(t)
	dir := t.TempDir()
	for i, it := range items {
		var kept []string
		for _, line := range strings.Split(doc, "\n") {
			if !strings.Contains(strings.ToLower(line), strings.ToLower(it.name)) {
				kept = append(kept, line)
			}
		}
		p := filepath.Join(dir, "api-"+strconv.Itoa(i)+".md")
		if err := os.WriteFile(p, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(missingFromDoc(readDoc(t, p), []docItem{it}), it.what+" "+it.name) {
			t.Errorf("a doc without the %s %q passes the check", it.what, it.name)
		}
	}
	// The source scans found what they exist for (a scan reading nothing
	// would make every doc pass).
	for _, want := range []docItem{
		{what: "console route", name: "GET /ui/events"}, {what: "console route", name: "POST /ui/login"},
		{what: "OTEL variable", name: "OTEL_SDK_DISABLED"}, {what: "OTEL variable", name: "OTEL_PROPAGATORS"},
		{what: "span name", name: "fencegate.check"}, {what: "span attribute", name: "fencegate.store"},
	} {
		if !slices.ContainsFunc(items, func(it docItem) bool { return it.what == want.what && it.name == want.name }) {
			t.Errorf("the %s %q was not collected from the code", want.what, want.name)
		}
	}
	// A reason documented with the wrong status is caught too.
	wrong := strings.Replace(doc, "| `draining` | 429", "| `draining` | 409", 1)
	if wrong == doc {
		t.Fatal("the draining row is not where the test expects it")
	}
	for _, it := range items {
		if it.what == "reason" && it.name == string(fencecheck.ReasonDraining) {
			if len(missingFromDoc(wrong, []docItem{it})) == 0 {
				t.Error("a doc giving draining the wrong status passes the check")
			}
		}
	}
}

// stringConsts returns the values of the exported string constants in the
// non-test Go files of dir whose names start with prefix.
func stringConsts(t *testing.T, dir, prefix string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() || !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, v)
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s* string constants in %s: the scan is broken", prefix, dir)
	}
	return out
}

// metricNames returns every metric the gateway's packages register (read
// from their collectors' descriptions), plus every `Name: "fencegate_…"`
// in the module's non-test source, so a package added later is covered
// without editing this test.
func metricNames(t *testing.T) []string {
	t.Helper()
	rec := &recordingRegisterer{}
	store := locktest.OpenBolt(t)
	if _, err := lockserver.New(lockserver.Options{Store: store, Registerer: rec, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	checker := fencecheck.New(store, fencecheck.Options{Registerer: rec})
	fencecheck.NewAuditor(store, fencecheck.AuditorOptions{Registerer: rec})
	if _, err := admission.New(checker, admission.Options{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range rec.names {
		names[n] = true
	}
	if len(names) == 0 {
		t.Fatal("no metrics recorded: the recorder is broken")
	}

	nameRE := regexp.MustCompile(`Name:\s*"(fencegate_[a-z0-9_]+)"`)
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); p != ".." && (strings.HasPrefix(base, ".") || base == "e2e" || base == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range nameRE.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// recordingRegisterer records the fully qualified names its collectors
// describe.
type recordingRegisterer struct {
	names []string
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqNameRE.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recordingRegisterer) Unregister(prometheus.Collector) bool { return false }
