// Package health is the gateway's one lifecycle, which every listener of
// `fencegate serve` and `fencegate proxy` follows: starting (listeners
// bound, not yet serving) → ready (serving; ready while the store answers
// a ping and every extra check passes) → draining (a signal came: every
// listener reports unready at once, then drains) → stopped.
//
// One Readiness answers /healthz and /readyz on every HTTP listener that
// mounts them and keeps every grpc.health.v1 server it follows in step, so
// the lock API's HTTP and gRPC listeners, the authz listener, the webhook
// and a standalone proxy's metrics listener never disagree, and a signal
// turns all of them unready in the same instant.
//
// It lives under internal/: only cmd/fencegate runs it.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/lockstore"
)

// Phase is where the process is in its lifecycle. Phases only move forward.
type Phase int32

const (
	// Starting: the listeners are being bound; nothing is served yet, so
	// nothing may report ready.
	Starting Phase = iota
	// Ready: every listener serves. /readyz is 200 while the store answers
	// a ping and the extra checks pass, 503 otherwise.
	Ready
	// Draining: a shutdown began. Every listener reports unready (/readyz
	// 503, gRPC health NOT_SERVING) but still serves, for the shutdown
	// delay, then stops accepting and finishes what is in flight.
	Draining
	// Stopped: the listeners are closed.
	Stopped
)

var phaseNames = [...]string{"starting", "ready", "draining", "stopped"}

// String is the phase's name as /readyz and /healthz report it.
func (p Phase) String() string {
	if p >= 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", int32(p))
}

// Defaults of Options.
const (
	// DefaultTimeout bounds one readiness check (the store's ping and the
	// extra checks): a probe must answer before the kubelet's own timeout
	// (its 1 s default is too tight for a remote backend under load; 2 s
	// stays under typical probe settings).
	DefaultTimeout = 2 * time.Second
	// DefaultInterval is how often the gRPC health servers re-check.
	DefaultInterval = 5 * time.Second
)

// Check is an extra readiness condition beside the store's ping (the
// webhook's certificate). Name appears in logs, never on the wire.
type Check struct {
	Name  string
	Ready func(ctx context.Context) error
}

// Options configure a Readiness. Store is required.
type Options struct {
	// Store is pinged by every readiness check.
	Store Store
	// Checks run after the ping, in order.
	Checks []Check
	// Replication, when set, reports the store's replication mode on a
	// ready /readyz (informational: a store that cannot say still serves).
	Replication func(ctx context.Context) (lockstore.Replication, error)
	// Timeout bounds one check; zero is DefaultTimeout.
	Timeout time.Duration
	// Interval is how often the gRPC health servers re-check; zero is
	// DefaultInterval.
	Interval time.Duration
	// Registerer receives fencegate_store_ready (nil: not exported).
	Registerer prometheus.Registerer
	// Logger: nil is slog.Default().
	Logger *slog.Logger
}

// Store is the role of the lock store readiness reads: its ping, and its
// backend's name (the label of fencegate_store_ready). Every
// lockstore.Store is one.
type Store interface {
	lockstore.Pinger
	lockstore.Describer
}

// Readiness is the process's lifecycle and readiness, shared by every
// listener. Its methods are safe for concurrent use.
type Readiness struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	phase   Phase
	follows []follow
	checks  []Check
	serving bool          // the gRPC status last set (true: SERVING)
	wake    chan struct{} // Serve asks Run to check at once
}

// follow is one grpc.health.v1 server and the services it reports.
type follow struct {
	hs       *grpchealth.Server
	services []string
}

// New builds a Readiness in phase Starting and registers
// fencegate_store_ready.
func New(o Options) (*Readiness, error) {
	if o.Store == nil {
		return nil, errors.New("health: Options.Store is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	r := &Readiness{o: o, log: o.Logger, wake: make(chan struct{}, 1), checks: o.Checks}
	if r.log == nil {
		r.log = slog.Default()
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(newStoreReady(o.Store, o.Timeout)); err != nil {
			return nil, fmt.Errorf("health: registering metrics: %w", err)
		}
	}
	return r, nil
}

// Phase returns the current phase.
func (r *Readiness) Phase() Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// Serve moves Starting to Ready: every listener serves. The gRPC health
// servers turn SERVING at the first check that passes, which Run makes at
// once.
func (r *Readiness) Serve() {
	r.mu.Lock()
	if r.phase == Starting {
		r.phase = Ready
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Drain moves to Draining: from this instant /readyz answers 503 and every
// followed gRPC health server NOT_SERVING (for good: a draining process
// never reports ready again). The listeners keep serving until the caller
// stops them.
func (r *Readiness) Drain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase >= Draining {
		return
	}
	r.phase = Draining
	for _, f := range r.follows {
		f.hs.Shutdown() // every service NOT_SERVING; later updates ignored
	}
	r.serving = false
}

// Stop moves to Stopped (the listeners are closed).
func (r *Readiness) Stop() {
	r.Drain()
	r.mu.Lock()
	r.phase = Stopped
	r.mu.Unlock()
}

// AddCheck adds an extra readiness condition (a listener built after the
// Readiness, as the webhook's certificate).
func (r *Readiness) AddCheck(c Check) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, c)
}

// errPhase is a readiness failure that is the phase's, not a dependency's.
type errPhase Phase

func (e errPhase) Error() string { return "fencegate is " + Phase(e).String() }

// Check runs the readiness checks within Options.Timeout: the phase must
// be Ready, the store must answer a ping and every extra check must pass.
func (r *Readiness) Check(ctx context.Context) error {
	if p := r.Phase(); p != Ready {
		return errPhase(p)
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	if err := r.o.Store.Ping(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	r.mu.Lock()
	checks := r.checks
	r.mu.Unlock()
	for _, c := range checks {
		if err := c.Ready(ctx); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	return nil
}

// GRPC registers a new grpc.health.v1 server on g that reports services
// (give "" for the server as a whole) as this Readiness goes, and returns
// it.
func (r *Readiness) GRPC(g grpc.ServiceRegistrar, services ...string) *grpchealth.Server {
	hs := grpchealth.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	r.Follow(hs, services...)
	return hs
}

// Follow keeps services on hs (a health server registered elsewhere, as
// authz registers its own) in step with this Readiness. It sets their
// status at once: a listener never reports SERVING before a check passed,
// nor "unknown service".
func (r *Readiness) Follow(hs *grpchealth.Server, services ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if r.serving && r.phase == Ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, s := range services {
		hs.SetServingStatus(s, st)
	}
	if r.phase >= Draining {
		hs.Shutdown()
		return
	}
	r.follows = append(r.follows, follow{hs: hs, services: services})
}

// Run keeps the followed gRPC health servers in step with Check: at once
// when Serve is called, then every Options.Interval, until ctx ends. The
// caller runs it in a goroutine it owns.
func (r *Readiness) Run(ctx context.Context) {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
		if r.Phase() != Ready {
			continue // starting: nothing served yet; draining: Drain set them
		}
		err := r.Check(ctx)
		if ctx.Err() != nil {
			return
		}
		r.set(err == nil, err, first)
		first = false
	}
}

// set reports serving on every followed server, unless a drain began.
func (r *Readiness) set(serving bool, err error, force bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != Ready || (serving == r.serving && !force) {
		return
	}
	if !serving {
		r.log.Warn("gRPC health: not serving", "err", err)
	}
	r.serving = serving
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, f := range r.follows {
		for _, s := range f.services {
			f.hs.SetServingStatus(s, st)
		}
	}
}
