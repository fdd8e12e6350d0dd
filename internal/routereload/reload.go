// Package routereload re-reads the route table while the gateway runs:
// on SIGHUP and when the config file's or its routesFile's content
// changes, with every read bounded (config.ReadFile, and a read not back
// within 5 s given up), keeping the served table when the new one does
// not load. It counts fencegate_routes_reload_total, shows
// fencegate_routes_entries and fencegate_routes_file_info, and owns the
// one way a command reads the config file alone (ReadConfig) and compiles
// the table it names (Compile). Imports config and routes of
// ours; only cmd/fencegate imports it.
package routereload

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/routes"
)

// Compile compiles the route table every edge serves: every entry of
// routes: (the routesFile's included) and proxy.routes. nil: no entry and
// no routesFile. proxy.routes alone make a proxy-only table
// (routes.Options.ProxyOnly): the fencing reverse proxy serves it, the
// authz edges keep their callers' options, as before the table. With a
// routesFile the table exists even while it is empty, so the last
// FencePolicy's entries can go without a restart.
// The error lists every problem, one per line.
func Compile(c *config.Config) (*routes.Table, error) {
	if len(c.Routes) == 0 && c.RoutesFile == "" && len(c.Proxy.Routes) == 0 {
		return nil, nil
	}
	u, err := routes.ParseUnmatched(c.Check.UnmatchedWrites)
	if err != nil {
		return nil, err
	}
	return routes.Compile(c.RouteTable(), routes.Options{Unmatched: u, ProxyOnly: len(c.Routes) == 0 && c.RoutesFile == ""})
}

// PollInterval is how often the config file is read for a changed
// route table (a Kubernetes ConfigMap update swaps a symlink; nothing
// signals the process). A command's tests slow it to see SIGHUP alone
// apply a table; nothing else sets it.
var PollInterval = 2 * time.Second

// Reloader re-reads the route table from the config file on SIGHUP
// and when the file's content changes. A table that does not load leaves
// the served one in place: every problem is logged, the failure counted.
type Reloader struct {
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
	// drain is loaded's Drain(): what the proxy's barrier entries, as
	// last applied, ask of a shutdown (read from the shutdown's goroutine).
	drain atomic.Int64
	// Accept, when set before Run, refuses a table the running listeners
	// cannot serve (the proxy's: one with no upstream entry).
	Accept func(*routes.Table) error
}

// New watches f.Path for the table held by h, counting reloads on reg: f
// is the file as the served table was read from it (config.FlagsFile or
// ReadConfig: one read), hup delivers SIGHUP.
func New(f config.File, hup <-chan os.Signal, h *routes.Holder, reg prometheus.Registerer, log *slog.Logger) *Reloader {
	loaded, sum := f.Config, sourceSum(f.Content, f.Config.RoutesFileSum)
	r := &Reloader{path: f.Path, hup: hup, holder: h, log: log, loaded: loaded, sum: sum, running: loaded.Check, runningProof: loaded.Proof,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_routes_reload_total",
			Help: "Route table reloads (SIGHUP, or a changed config file or routesFile), by result: ok or error (the old table kept serving)."}, []string{"result"}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_routes_entries",
			Help: "Entries of the route table being served (0: none configured)."}),
	}
	r.drain.Store(int64(loaded.Drain()))
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

// ReadConfig reads path and loads it alone over the defaults, its
// routesFile included, as a reload does. The reads are bounded
// (config.ReadFile): regular files of at most config.MaxFileSize bytes.
func ReadConfig(path string) (config.File, error) {
	b, err := config.ReadFile(path)
	c, _, err := loadConfigBytes(path, b, err)
	return config.File{Path: path, Content: b, Config: c}, err
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
func (r *Reloader) currentSum() ([32]byte, error) {
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
func bounded[T any](r *Reloader, read func(readFile func(string) ([]byte, error)) (T, error)) (T, error) {
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
func (r *Reloader) load() (config.Config, [32]byte, error) {
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

// Run reloads on SIGHUP and on a changed file until ctx ends.
func (r *Reloader) Run(ctx context.Context) {
	t := time.NewTicker(PollInterval)
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
func (r *Reloader) reload(trigger string) {
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
			t, err := Compile(&c)
			switch {
			case err != nil:
				problems = append(problems, strings.Split(err.Error(), "\n")...)
			case (t == nil || t.ProxyOnly()) && r.holder.Load() != nil && !r.holder.Load().ProxyOnly():
				// A file whose routes: went missing (a YAML slip) would
				// hand every route choice back to the callers: refused.
				problems = append(problems, "routes: empty, while a route table is served; removing the table takes a restart")
			case t == nil && r.holder.Load() != nil:
				problems = append(problems, "routes: the proxy's entries went missing; removing them takes a restart")
			default:
				if r.Accept != nil {
					if err := r.Accept(t); err != nil {
						problems = append(problems, err.Error())
						break
					}
				}
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

func (r *Reloader) apply(trigger string, c config.Config, t *routes.Table) {
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
	r.drain.Store(int64(c.Drain()))
}

// Drain is how long a shutdown must let the table's barrier writes
// finish, as the table was last applied (config.Config.Drain): a reload
// may add a barrier entry or raise its maxWait or maxWrite. Safe to call
// from any goroutine.
func (r *Reloader) Drain() time.Duration { return time.Duration(r.drain.Load()) }

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
