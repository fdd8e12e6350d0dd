package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/routereload"
	"github.com/fencegate/fencegate/internal/serving"
	"github.com/fencegate/fencegate/internal/tracing/otelenv"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/routes"
	"github.com/fencegate/fencegate/writeproof"
)

// proxyIgnoresHUP makes `fencegate proxy` ignore SIGHUP and never reload,
// as before #27 (tests only: the broken variant of its reload test).
var proxyIgnoresHUP = false

// runProxy is `fencegate proxy`: the fencing reverse proxy on its own,
// against a store URL (the gateway's Redis, PostgreSQL or Firestore, or a
// local bolt file), with routes from the config file's proxy section.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// SIGHUP reloads the route table (as serve does); caught from the
	// start, so that one sent while the store opens neither kills the
	// process nor is lost.
	hup := make(chan os.Signal, 1)
	if proxyIgnoresHUP {
		signal.Ignore(syscall.SIGHUP)
	} else {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	fs := newFlagSet("proxy", "usage: fencegate proxy --config FILE [flags]\n\nA fencing reverse proxy: every write on a route is checked against the store\nbefore it reaches the upstream. Routes come from the config file's routes: entries that\nhave an upstream (or proxy.routes).")
	configPath := fs.String("config", "", "YAML config file with the routes: entries that have an upstream, or proxy.routes (env FENCEGATE_CONFIG)")
	listen := fs.String("listen", "", "proxy listener host:port (default proxy.addr, else "+config.DefaultProxyAddr+")")
	store := fs.String("store", "", "store URL; overrides the config's store (env FENCEGATE_STORE)")
	metricsAddr := fs.String("metrics-addr", "", "listener for /metrics, /healthz, /readyz, or \"off\" (default proxy.metricsAddr, else off)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info)")
	logFormat := fs.String("log-format", "", "text or json (default text)")
	var shutdownDelay *time.Duration
	fs.Func("shutdown-delay", "after SIGTERM or SIGINT, how long the listeners keep serving while /readyz answers 503, before draining (default shutdown.delay, else 0s)", func(v string) error {
		d, err := time.ParseDuration(v)
		shutdownDelay = &d
		return err
	})
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate proxy: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	cfg, set, err := proxyConfig(*configPath, os.Getenv, func(c *config.Config) {
		set := func(dst *string, v string) {
			if v != "" {
				*dst = v
			}
		}
		set(&c.Proxy.Addr, *listen)
		set(&c.Store, *store)
		set(&c.Proxy.MetricsAddr, *metricsAddr)
		set(&c.Log.Level, *logLevel)
		set(&c.Log.Format, *logFormat)
		if shutdownDelay != nil {
			c.Shutdown.Delay = config.Duration(*shutdownDelay)
		}
	})
	if err != nil {
		fmt.Fprintf(stderr, "fencegate proxy: %v\n", err)
		return exitUsage
	}
	set.hup = hup
	log := newLogger(cfg.Log, stderr)
	routeRedisLogs(log)
	if err := serveProxy(ctx, cfg, set, log); err != nil {
		log.Error("fencegate proxy stopped", "err", err)
		return exitFailure
	}
	return exitOK
}

// proxyConfig builds and validates the proxy's configuration: defaults, the
// file (read once, its routesFile included), FENCEGATE_STORE, then the
// flags. Every problem is listed, the routes' included.
func proxyConfig(path string, getenv func(string) string, flags func(*config.Config)) (config.Config, proxySettings, error) {
	c := config.Default()
	if path == "" {
		path = getenv("FENCEGATE_CONFIG")
	}
	if path == "" {
		return c, proxySettings{}, errors.New("a config file with routes (routes: entries with an upstream, or proxy.routes) is required (--config or FENCEGATE_CONFIG)")
	}
	f, err := routereload.ReadConfig(path)
	if err != nil {
		return c, proxySettings{}, err
	}
	c = f.Config
	c.Routes, c.Proxy.Routes = slices.Clone(c.Routes), slices.Clone(c.Proxy.Routes) // f.Config stays the file as read
	if v := getenv("FENCEGATE_STORE"); v != "" {
		c.Store = v
	}
	flags(&c)
	var p config.Problems
	if err := c.ValidateProxy(); err != nil {
		p = append(p, err.(config.Problems)...)
	}
	set := proxySettings{configFile: f}
	if set.store, err = parseStoreURL(c.Store); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			p = append(p, "store: "+line)
		}
	}
	// The table is compiled whatever config found: its problems (route
	// options, matches, entries no request can tell apart) are listed
	// with config's.
	if set.table, err = routereload.Compile(&c); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			p = append(p, "routes: "+line)
		}
	}
	// The proxy only verifies proofs: give it proof.verifyKeys (public
	// keys), so that a sidecar holds no seed that could mint proofs; the
	// signing keys' public halves work too (one config for both commands).
	if set.proofs, err = proofVerifier(c.Proof); err != nil {
		p = append(p, "proof: "+err.Error())
	}
	if set.tracing, err = otelenv.ConfigFromEnv(getenv); err != nil {
		p = append(p, "tracing: "+err.Error())
	}
	if len(p) > 0 {
		return c, set, p
	}
	return c, set, nil
}

// proxySettings is what `fencegate proxy` derives from its configuration
// before it opens anything.
type proxySettings struct {
	store storeURL
	// table is the route table (routes: and proxy.routes): the proxy
	// serves its entries with an upstream; configFile is the file as the
	// start read it (a reload compares against it), hup delivers SIGHUP.
	table      *routes.Table
	configFile config.File
	hup        <-chan os.Signal
	proofs     *writeproof.Verifier // nil: no proof keys configured
	tracing    otelenv.Config       // from the OTEL_* variables
}

// newProxyRunner builds the proxy listener. Its server bounds header reads
// and idle connections; request bodies are bounded per route by the proxy
// itself (bodyIdleTimeout, bodyTimeout), the upstream's answer by the
// transport's response-header timeout and a barrier write by its maxWrite,
// so the server's own read timeout is zero.
func newProxyRunner(c config.Proxy, conns connlimit.Limits, table *routes.Holder, checker *fencecheck.Checker, log *slog.Logger, goBG func(func(context.Context))) (*serving.HTTPRunner, *proxy.Proxy, error) {
	p, err := proxy.New(checker, table, proxy.Options{Logger: log, TrustForwarded: c.TrustForwarded})
	if err != nil {
		return nil, nil, err
	}
	tc, _, err := serving.ServerTLS("proxy", c.TLS, log, goBG)
	if err != nil {
		return nil, nil, err
	}
	r, err := serving.NewHTTP("proxy", c.ProxyAddr(), tc, p, 0, conns, log)
	if err != nil {
		return nil, nil, err
	}
	return r, p, nil
}

// serveProxy runs the standalone proxy until ctx ends, then drains: every
// in-flight write finishes (and deregisters from the barrier) or the drain
// deadline passes.
func serveProxy(ctx context.Context, cfg config.Config, set proxySettings, log *slog.Logger) error {
	gw, err := startGateway(ctx, cfg, gatewaySettings{store: set.store, tracing: set.tracing, proofs: set.proofs}, log)
	if err != nil {
		return err
	}
	defer gw.close()
	store, checker, reg, goBG := gw.store, gw.checker, gw.reg, gw.goBG
	// The route table, reloaded as serve reloads it (SIGHUP, a changed
	// config file or routesFile); a table with no upstream entry is
	// refused and the served one kept.
	table := routes.NewHolder(set.table)
	pr, p, err := newProxyRunner(cfg.Proxy, gw.conns, table, checker, log, goBG)
	if err != nil {
		return err
	}
	rl := routereload.New(set.configFile, set.hup, table, reg, log)
	rl.Accept = acceptProxyTable
	if !proxyIgnoresHUP {
		goBG(rl.Run)
	}
	log.Info("route table loaded", "routes", set.table.Len(), "hash", set.table.Hash())
	ls := &serving.Group{Health: gw.health, Delay: cfg.Shutdown.Delay.Std(), Drain: cfg.Drain(), DrainAtLeast: rl.Drain, Name: "fencegate proxy"}
	defer closeUnserved(ls)
	ls.Add("proxy", pr)
	if m := cfg.Proxy.MetricsAddr; m != "" && m != config.Off {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		gw.health.Register(mux, nil)
		mr, err := serving.NewHTTP("metrics", m, nil, mux, serving.ReadTimeout, gw.conns, log)
		if err != nil {
			return err
		}
		ls.Add("metrics", mr)
	}
	err = ls.Run(ctx, log, "store", store.Capabilities().Backend, "store_url", config.RedactURL(cfg.Store), "routes", set.table.Len())
	if n := p.InFlight(); n > 0 {
		log.Warn("drain deadline passed with barrier writes in flight; their entries expire at maxWrite", "count", n)
	}
	return err
}

// acceptProxyTable refuses a reloaded table the running proxy listener
// could serve nothing of.
func acceptProxyTable(t *routes.Table) error {
	if !proxy.HasUpstream(t) {
		return errors.New("routes: no entry has an upstream, while the proxy serves; the previous table keeps serving")
	}
	return nil
}
