package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/lockstore"
)

// Path is where the console is mounted.
const Path = "/ui"

// Bounds of what the console reads and holds.
const (
	// ListLimit caps the live locks read per listing.
	ListLimit = lockstore.DefaultListLimit
	// listMaxAge is how long one listing serves every viewer of this
	// process: the store is listed at most once per interval.
	listMaxAge = time.Second
	// denialsShown is how many denials a page renders.
	denialsShown = 50
	// timelineLimit bounds the denials one timeline reads.
	timelineLimit = 200
	// timelineScanLimit bounds the newest events a timeline opened by hash
	// scans for its key (the audit log filters by raw key only).
	timelineScanLimit = 2000
	// pollInterval is how often an event stream polls the audit log.
	pollInterval = time.Second
	// locksInterval is how often an event stream sends the live locks.
	locksInterval = 2 * time.Second
	// maxStreams bounds concurrent event streams per process, and
	// maxStreamsPerPrincipal those of one token (every session of it
	// included), so that one token cannot take every slot: a browser needs
	// one stream per open tab.
	maxStreams             = 64
	maxStreamsPerPrincipal = 8
	// readTimeout bounds each store read the console makes.
	readTimeout = 5 * time.Second
)

// Options configures a Console.
type Options struct {
	// Store is read for a key's current state (Inspect), the backend's
	// name and, when lockstore.As finds a lockstore.LockLister in it, the
	// live locks. Required.
	Store Store
	// Audit is read for denials. Nil shows none.
	Audit lockstore.AuditLog
	// Auth checks tokens. Nil means auth is off: the console is open, as
	// the lock API is.
	Auth *auth.Authenticator
	// RawKeys shows raw keys. Off, keys are shown as their hashes.
	RawKeys bool
	// Recorder holds this gateway's lock operations for the timelines. Nil
	// gets a new one (see Console.Record).
	Recorder *Recorder
	// Logger receives errors. Nil means slog.Default().
	Logger *slog.Logger
}

// Store is what the console reads of the store.
type Store interface {
	lockstore.Inspector
	lockstore.Describer
}

// Console serves the pages under Path.
type Console struct {
	ctx      context.Context
	store    Store
	lister   lockstore.LockLister
	audit    lockstore.AuditLog
	auth     *auth.Authenticator
	rawKeys  bool
	rec      *Recorder
	log      *slog.Logger
	now      func() time.Time
	sessions *sessions
	streams  streamSlots

	listMu  sync.Mutex
	listAt  time.Time
	list    lockstore.LockList
	listErr error
}

// New builds a console. ctx bounds its event streams: when it ends (the
// gateway is shutting down) every open stream finishes, so that the HTTP
// server's graceful shutdown is not held by them.
func New(ctx context.Context, o Options) *Console {
	c := &Console{
		ctx: ctx, store: o.Store, audit: o.Audit, auth: o.Auth, rawKeys: o.RawKeys,
		rec: o.Recorder, log: o.Logger, now: time.Now,
	}
	if c.rec == nil {
		c.rec = NewRecorder(0)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.lister, _ = lockstore.As[lockstore.LockLister](o.Store)
	c.sessions = newSessions(c.now)
	return c
}

// Record wraps the lock operations the lock API serves, so that this
// console's timelines show the acquisitions, extensions and releases it
// served (Recorder.Record).
func (c *Console) Record(l lockstore.Locks) lockstore.Locks { return c.rec.Record(l) }

// Register mounts the console on mux under Path, each route wrapped in mw
// (the lock API's access-log and recovery middleware; nil for none).
func (c *Console) Register(mux *http.ServeMux, mw func(http.Handler) http.Handler) {
	if mw == nil {
		mw = func(h http.Handler) http.Handler { return h }
	}
	route := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, mw(secure(h))) }
	route("GET "+Path, c.overview)
	route("GET "+Path+"/{$}", c.overview)
	route("GET "+Path+"/key", c.timeline)
	route("GET "+Path+"/events", c.events)
	route("POST "+Path+"/login", c.login)
	route("POST "+Path+"/logout", c.logout)
	route("GET "+Path+"/static/{file}", serveStatic)
}

// secure sets the headers every console reply carries: a CSP that allows
// only this origin's script and style (no inline code anywhere), no
// framing, no sniffing, no referrer to other sites (a timeline's URL may
// carry a key), no caching of pages showing locks.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// listing returns the live locks, read from the store at most once per
// listMaxAge for all viewers of this process.
func (c *Console) listing(ctx context.Context) (lockstore.LockList, error) {
	if c.lister == nil {
		return lockstore.LockList{}, errNoLister
	}
	c.listMu.Lock()
	defer c.listMu.Unlock()
	if !c.listAt.IsZero() && c.now().Sub(c.listAt) < listMaxAge {
		return c.list, c.listErr
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	c.list, c.listErr = c.lister.ListHeld(rctx, ListLimit)
	c.listAt = c.now()
	if c.listErr != nil {
		c.log.Warn("console: listing live locks failed", "err", c.listErr)
	}
	return c.list, c.listErr
}

var errNoLister = errors.New("this store cannot list its locks")
