package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/routes"
)

// compileTable compiles the route table every edge serves: every entry
// of routes: (the routesFile's included) and proxy.routes. nil: no entry
// and no routesFile. proxy.routes alone make a proxy-only table
// (routes.Options.ProxyOnly): the fencing reverse proxy serves it, the
// authz edges keep their callers' options, as before the table. With a
// routesFile the table exists even while it is empty, so the last
// FencePolicy's entries can go without a restart.
// The error lists every problem, one per line.
func compileTable(c *config.Config) (*routes.Table, error) {
	if len(c.Routes) == 0 && c.RoutesFile == "" && len(c.Proxy.Routes) == 0 {
		return nil, nil
	}
	u, err := routes.ParseUnmatched(c.Check.UnmatchedWrites)
	if err != nil {
		return nil, err
	}
	return routes.Compile(c.RouteTable(), routes.Options{Unmatched: u, ProxyOnly: len(c.Routes) == 0 && c.RoutesFile == ""})
}

// routesPollInterval is how often the config file is read for a changed
// route table (a Kubernetes ConfigMap update swaps a symlink; nothing
// signals the process).
var routesPollInterval = 2 * time.Second

// tableReloader re-reads the route table from the config file on SIGHUP
// and when the file's content changes. A table that does not load leaves
// the served one in place: every problem is logged, the failure counted.
type tableReloader struct {
	path   string
	hup    <-chan os.Signal
	holder *routes.Holder
	log    *slog.Logger
	// loaded is the file as last applied (routes included), to tell which
	// other keys changed; sum its content's hash.
	loaded config.Config
	sum    [32]byte
	// running is check: as the process started with it: the caps the
	// checker enforces until a restart.
	running config.Check
	// runningProof: the proof keys the running checker verifies with
	// (restart-only, like the caps).
	runningProof config.Proof
	reloads      *prometheus.CounterVec
	entries      prometheus.Gauge
	// stuck counts reads given up on that have not returned (read).
	stuck atomic.Int32
	// fileInfo names the routes file's hash the served table was built
	// from (fencegate controller compares it with what it published).
	fileInfo *prometheus.GaugeVec
	// accept, when set, refuses a table the running listeners cannot
	// serve (the proxy's: one with no upstream entry).
	accept func(*routes.Table) error
}

// newTableReloader watches path for the table held by h, counting
// reloads on reg: loaded and sum are the file as the served table was
// read from it, hup delivers SIGHUP.
func newTableReloader(path string, loaded config.Config, sum [32]byte, hup <-chan os.Signal, h *routes.Holder, reg prometheus.Registerer, log *slog.Logger) *tableReloader {
	r := &tableReloader{path: path, hup: hup, holder: h, log: log, loaded: loaded, sum: sum, running: loaded.Check, runningProof: loaded.Proof,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_routes_reload_total",
			Help: "Route table reloads (SIGHUP, or a changed config file or routesFile), by result: ok or error (the old table kept serving)."}, []string{"result"}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_routes_entries",
			Help: "Entries of the route table being served (0: none configured)."}),
	}
	r.reloads.WithLabelValues("ok")
	r.reloads.WithLabelValues("error")
	r.entries.Set(float64(h.Load().Len()))
	reg.MustRegister(r.reloads, r.entries)
	if loaded.RoutesFile != "" {
		r.fileInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fencegate_routes_file_info",
			Help: "1, labelled with the SHA-256 of the routesFile content the served route table was built from."}, []string{"sha256"})
		r.fileInfo.WithLabelValues(loaded.RoutesFileSum).Set(1)
		reg.MustRegister(r.fileInfo)
	}
	return r
}

// readConfigFile loads path over the defaults (and its routesFile), with
// the hash of both contents. The reads are bounded (config.ReadFile): regular
// files of at most config.MaxFileSize bytes.
func readConfigFile(path string) (config.Config, [32]byte, error) {
	b, err := config.ReadFile(path)
	return loadConfigBytes(path, b, err)
}

func loadConfigBytes(path string, b []byte, err error) (config.Config, [32]byte, error) {
	c := config.Default()
	if err != nil {
		return c, [32]byte{}, fmt.Errorf("config: %w", err)
	}
	// One read of each: the hash is of exactly the content applied.
	if err := c.LoadBytes(path, b); err != nil {
		return c, sha256.Sum256(b), err
	}
	err = c.IncludeRoutesFile()
	return c, sourceSum(b, c.RoutesFileSum), err
}

// sourceSum is the hash of what a table is read from: the config file's
// content and the routes file's hash ("" without one).
func sourceSum(configFile []byte, routesFileSum string) [32]byte {
	if routesFileSum == "" {
		return sha256.Sum256(configFile)
	}
	return sha256.Sum256(append(append(slices.Clip(configFile), 0), routesFileSum...))
}

// currentSum is sourceSum of the files as they are now, read as a reload
// reads them (bounded: given up after reloadReadTimeout).
func (r *tableReloader) currentSum() ([32]byte, error) {
	routesFile := r.loaded.RoutesFile
	return bounded(r, func(readFile func(string) ([]byte, error)) ([32]byte, error) {
		b, err := readFile(r.path)
		if err != nil {
			return [32]byte{}, err
		}
		c := config.Config{RoutesFile: routesFile}
		if c.RoutesFile != "" {
			var probe struct {
				RoutesFile string `yaml:"routesFile"`
			}
			// The routes file the config file names now (it may have moved).
			if yaml.Unmarshal(b, &probe) == nil {
				c.RoutesFile = probe.RoutesFile
			}
		}
		_ = c.IncludeRoutesFile() // a file that does not load: reload reports it, once
		return sourceSum(b, c.RoutesFileSum), nil
	})
}

// A reload's reads of the config file and its routesFile. The reloader is
// one goroutine serving SIGHUP and the poll, so a read that never returns
// (a FIFO a symlink swap put there, a hung network filesystem) would stop
// every later reload, a valid table's included (#26 item 8).
// config.ReadFile refuses what is not a regular file without blocking;
// beyond that the reads run apart and are given up after
// reloadReadTimeout, and at most maxStuckReads given-up reads may still
// hang before the reloader stops starting new ones (each holds a goroutine
// and a descriptor).
var (
	reloadReadTimeout = 5 * time.Second
	// readConfigBytes reads the config file (a test makes it hang).
	readConfigBytes = config.ReadFile
	// reloadBlocking reads in the reloader's goroutine, unbounded: the
	// behaviour before #26 item 8, only so a test can show it is caught.
	reloadBlocking = false
)

const maxStuckReads = 4

// bounded runs read (the config file's reads, with readConfigBytes as it
// is when the read starts) apart from the reloader and gives it up after
// reloadReadTimeout.
func bounded[T any](r *tableReloader, read func(readFile func(string) ([]byte, error)) (T, error)) (T, error) {
	var zero T
	if reloadBlocking {
		return read(os.ReadFile)
	}
	if n := r.stuck.Load(); n >= maxStuckReads {
		return zero, fmt.Errorf("%s: %d earlier reads still have not returned; not reading again until one does", r.path, n)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	r.stuck.Add(1)
	readFile := readConfigBytes
	go func() {
		defer r.stuck.Add(-1)
		v, err := read(readFile)
		ch <- result{v, err}
	}()
	t := time.NewTimer(reloadReadTimeout)
	defer t.Stop()
	select {
	case res := <-ch:
		return res.v, res.err
	case <-t.C:
		return zero, fmt.Errorf("%s: not read within %v; given up", r.path, reloadReadTimeout)
	}
}

// load reads and loads the config file and its routesFile (bounded).
func (r *tableReloader) load() (config.Config, [32]byte, error) {
	type loaded struct {
		c   config.Config
		sum [32]byte
	}
	l, err := bounded(r, func(readFile func(string) ([]byte, error)) (loaded, error) {
		b, err := readFile(r.path)
		c, sum, err := loadConfigBytes(r.path, b, err)
		return loaded{c, sum}, err
	})
	return l.c, l.sum, err
}

// run reloads on SIGHUP and on a changed file until ctx ends.
func (r *tableReloader) run(ctx context.Context) {
	t := time.NewTicker(routesPollInterval)
	defer t.Stop()
	// An edit made between the start's read and now is applied at once.
	if sum, err := r.currentSum(); err == nil && sum != r.sum {
		r.reload("file changed")
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.hup:
			r.reload("SIGHUP")
		case <-t.C:
			// A file that cannot be read is reported by SIGHUP's reload,
			// not on every poll.
			if sum, err := r.currentSum(); err == nil && sum != r.sum {
				r.reload("file changed")
			}
		}
	}
}

// reload reads the file and swaps in its table, or keeps the old one.
func (r *tableReloader) reload(trigger string) {
	c, sum, err := r.load()
	r.sum = sum // a broken file is reported once, not on every poll
	var problems []string
	if err != nil {
		problems = append(problems, err.Error())
	} else {
		// The caps are restart-only: a table is checked against the ones
		// the running checker enforces, not the file's new values.
		v := c
		v.Check.MaxWriteCap, v.Check.MaxWaitCap = r.running.MaxWriteCap, r.running.MaxWaitCap
		if err := v.ValidateRoutes(); err != nil {
			problems = append(problems, err.(config.Problems)...)
		}
		// So are the proof keys: an entry asking for signed proofs of a
		// gateway without a key would be refused 503 on every write now,
		// and stop the gateway starting at its next restart.
		v.Proof = r.runningProof
		problems = append(problems, v.ProofKeyProblems()...)
		if len(problems) == 0 {
			t, err := compileTable(&c)
			switch {
			case err != nil:
				problems = append(problems, strings.Split(err.Error(), "\n")...)
			case (t == nil || t.ProxyOnly()) && r.holder.Load() != nil && !r.holder.Load().ProxyOnly():
				// A file whose routes: went missing (a YAML slip) would
				// hand every route choice back to the callers: refused.
				problems = append(problems, "routes: empty, while a route table is served; removing the table takes a restart")
			case t == nil && r.holder.Load() != nil:
				problems = append(problems, "routes: the proxy's entries went missing; removing them takes a restart")
			case r.accept != nil && r.accept(t) != nil:
				problems = append(problems, r.accept(t).Error())
			default:
				r.apply(trigger, c, t)
				return
			}
		}
	}
	r.reloads.WithLabelValues("error").Inc()
	for _, p := range problems {
		r.log.Error("route table reload failed; the previous table keeps serving", "trigger", trigger, "problem", p)
	}
}

func (r *tableReloader) apply(trigger string, c config.Config, t *routes.Table) {
	r.holder.Store(t)
	r.reloads.WithLabelValues("ok").Inc()
	r.entries.Set(float64(t.Len()))
	if r.fileInfo != nil {
		r.fileInfo.Reset()
		r.fileInfo.WithLabelValues(c.RoutesFileSum).Set(1)
	}
	r.log.Info("route table reloaded", "trigger", trigger, "routes", t.Len(), "hash", t.Hash())
	if changed := restartKeys(r.loaded, c); len(changed) > 0 {
		r.log.Warn("config keys changed that apply only at restart; not applied", "keys", strings.Join(changed, ","))
	}
	r.loaded = c
}

// restartKeys names the top-level keys that differ between two loads of
// the file, routes:, proxy.routes and check.unmatchedWrites aside: those a
// reload applies (the upstream entries included: the proxy serves the
// table it reloads). Whether there are upstream entries at all is
// restart-only: `fencegate serve` runs its proxy listener when it starts
// with some.
func restartKeys(old, cur config.Config) []string {
	var out []string
	if (len(old.ProxyEntries()) > 0) != (len(cur.ProxyEntries()) > 0) {
		out = append(out, "upstream entries (the proxy listener runs only when the gateway starts with some)")
	}
	old.Routes, cur.Routes = nil, nil
	old.Proxy.Routes, cur.Proxy.Routes = nil, nil
	old.RoutesFileSum, cur.RoutesFileSum = "", ""
	old.Check.UnmatchedWrites, cur.Check.UnmatchedWrites = "", ""
	ov, cv := reflect.ValueOf(old), reflect.ValueOf(cur)
	for i := 0; i < ov.NumField(); i++ {
		if !reflect.DeepEqual(ov.Field(i).Interface(), cv.Field(i).Interface()) {
			name, _, _ := strings.Cut(ov.Type().Field(i).Tag.Get("yaml"), ",")
			out = append(out, name)
		}
	}
	return out
}

// runRoutes is `fencegate routes <subcommand>`.
func runRoutes(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: fencegate routes <subcommand> [flags]\n\nsubcommands:\n  check   validate the route table and show which entry a sample request matches\n  istio   print the Istio AuthorizationPolicy (CUSTOM) and DestinationRule generated from the table\n\nRun 'fencegate routes <subcommand> -h' for its flags."
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return exitOK
	}
	switch args[0] {
	case "check":
		return routesCheck(ctx, args[1:], stdout, stderr)
	case "istio":
		return routesIstio(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "fencegate routes: unknown subcommand %q\n\n%s\n", args[0], usage)
	return exitUsage
}

// requestFlags collects repeated --request values.
type requestFlags []string

func (r *requestFlags) String() string { return strings.Join(*r, "; ") }
func (r *requestFlags) Set(v string) error {
	// A sample that is not "METHOD URL" is a bad flag (exit 2), not an
	// answer about the table (exit 1): nothing was checked.
	method, raw, found := strings.Cut(strings.TrimSpace(v), " ")
	u, err := url.Parse(strings.TrimSpace(raw))
	if !found || method == "" || err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not \"METHOD URL\" with an absolute http(s) URL (\"PUT https://api.example.com/orders/42\")", v)
	}
	*r = append(*r, v)
	return nil
}

// headerFlags collects repeated --header "name: value" values.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }
func (h headerFlags) Set(v string) error {
	name, val, ok := strings.Cut(v, ":")
	if !ok || !fencecheck.ValidHeaderName(strings.TrimSpace(name)) {
		return fmt.Errorf("%q is not \"name: value\"", v)
	}
	http.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(val))
	return nil
}

// routesCheck is `fencegate routes check`: it validates the config file's
// route table as serve would load it (or reload it), prints its entries,
// and for each --request the entry that governs it and the key it yields.
// Exit 0: valid, and every --request has an entry that would check it; 2:
// the table (or a flag, a --request that is not "METHOD URL" included)
// does not load; 1: a --request no entry matches, or one refused 400
// malformed (a path that cannot be routed, or that names no key).
func routesCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("routes check", "usage: fencegate routes check --config FILE [--request \"PUT https://api.example.com/orders/42\"]...\n\nValidates the route table as `fencegate serve` loads it, lists its entries, and\nshows which entry governs each sample request and the lock key it yields.")
	configPath := fs.String("config", "", "YAML config file with routes: (env FENCEGATE_CONFIG)")
	var reqs requestFlags
	hdrs := headerFlags{}
	fs.Var(&reqs, "request", `a sample request, "METHOD URL" ("PUT https://api.example.com/orders/42"); repeatable`)
	fs.Var(hdrs, "header", `a header of every sample request, "name: value" (x-fence-key: orders/7); repeatable`)
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate routes check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	path := *configPath
	if path == "" {
		path = os.Getenv("FENCEGATE_CONFIG")
	}
	if path == "" {
		fmt.Fprintln(stderr, "fencegate routes check: --config is required")
		return exitUsage
	}
	c, _, err := readConfigFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "fencegate routes check: %v\n", err)
		return exitUsage
	}
	var problems []string
	if err := c.ValidateRoutes(); err != nil {
		problems = append(problems, err.(config.Problems)...)
	}
	// What serve would refuse at start besides the table: a table that
	// requires signed proofs in a file with no key to verify them.
	problems = append(problems, c.ProofKeyProblems()...)
	var t *routes.Table
	if len(problems) == 0 {
		if t, err = compileTable(&c); err != nil {
			problems = append(problems, strings.Split(err.Error(), "\n")...)
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "fencegate routes check: the route table does not load:\n  - %s\n", strings.Join(problems, "\n  - "))
		return exitUsage
	}
	if t == nil {
		fmt.Fprintln(stdout, "no route table (routes: is empty): every request takes its caller's options")
		return exitOK
	}
	fmt.Fprintf(stdout, "route table: %d entries, hash %s, unmatched writes: %s\n", t.Len(), t.Hash(), t.Unmatched())
	if t.ProxyOnly() {
		fmt.Fprintln(stdout, "proxy.routes alone: the fencing reverse proxy's table; the authz edges take their callers' options")
	}
	for _, e := range t.Entries() {
		fmt.Fprintf(stdout, "  %s\n", describeEntry(e))
	}
	for _, w := range routes.HostChoices(t) {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	code := exitOK
	for _, r := range reqs {
		line, ok := explainRequest(t, r, http.Header(hdrs))
		fmt.Fprintln(stdout, line)
		if !ok {
			code = exitNo
		}
	}
	return code
}

// describeEntry is one line about an entry: its match and options.
func describeEntry(e *routes.Entry) string {
	m := e.Config.Match
	hosts := "any host"
	if len(m.Hosts) > 0 {
		hosts = strings.Join(m.Hosts, ",")
	}
	typ := m.Path.Type
	if typ == "" {
		typ = routes.PathPrefix
	}
	val := m.Path.Value
	if val == "" {
		val = "/"
	}
	methods := "any method"
	if len(m.Methods) > 0 {
		methods = strings.Join(m.Methods, ",")
	}
	rt := e.Route
	key := "from header " + rt.KeyHeader
	if rt.Key != nil {
		key = fmt.Sprintf("%q", rt.Key.String())
	}
	s := fmt.Sprintf("%s: %s %s %q, %s; key %s, policy %s, mode %s, proof %s, writes %s", e.Name, hosts, typ, val, methods,
		key, rt.Policy, rt.Mode, rt.Proof, writeMethods(rt.Methods))
	if rt.Barrier {
		s += ", barrier"
	}
	if e.Upstream != nil {
		s += ", upstream " + e.Upstream.Redacted()
	}
	return s
}

func writeMethods(ms fencecheck.MethodSet) string {
	if s := ms.String(); s != "" {
		return s
	}
	return fencecheck.DefaultWriteMethodsSpec
}

// explainRequest says which entry governs "METHOD URL" and the key it
// yields; ok is false when no entry does or the request would be refused
// 400 malformed (its path names no key under the entry's template).
func explainRequest(t *routes.Table, spec string, h http.Header) (string, bool) {
	method, raw, found := strings.Cut(strings.TrimSpace(spec), " ")
	u, err := url.Parse(strings.TrimSpace(raw))
	if !found || err != nil || u.Host == "" {
		return fmt.Sprintf("%s: not \"METHOD URL\" (PUT https://api.example.com/orders/42)", spec), false
	}
	path := u.EscapedPath()
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	if path == "" {
		path = "/"
	}
	head := fmt.Sprintf("%s %s → ", method, u.String())
	e, err := t.MatchRequest(u.Host, fencecheck.Input{Method: method, Path: path, Header: h.Get,
		Count: func(lc string) int { return len(h.Values(lc)) }})
	if err != nil {
		return head + "refused: writes are denied 400 malformed (" + err.Error() + ")", false
	}
	if e == nil {
		if t.Unmatched() == routes.UnmatchedDefaults {
			return head + "no entry: checked with the caller's options (check.unmatchedWrites: defaults)", false
		}
		return head + "no entry: writes fail closed, 503 unavailable (check.unmatchedWrites: deny); reads pass", false
	}
	rt := e.Route
	req, kerr := rt.Request(fencecheck.Input{Method: method, Path: path, Header: h.Get,
		Count: func(lc string) int { return len(h.Values(lc)) }, CanFinish: true, Trusted: true})
	out := head + "route " + e.Name
	switch {
	case !req.Write:
		out += ": a read (passes unchecked)"
	case rt.Policy == fencecheck.PolicyOff:
		out += ": a write, policy off (passes unchecked)"
	case kerr != nil:
		return out + fmt.Sprintf(": a write with no key, refused 400 malformed (%v)", kerr), false
	case req.Key == "" && rt.Key == nil:
		out += fmt.Sprintf(": a write; key from header %s (none given: --header \"%s: KEY\")", rt.KeyHeader, rt.KeyHeader)
	default:
		out += fmt.Sprintf(": a write; key %q, fence from %s, policy %s, mode %s, proof %s", req.Key, rt.FenceHeader, rt.Policy, rt.Mode, rt.Proof)
	}
	return out, true
}
